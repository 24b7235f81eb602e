"""Pairing: shuffled, duplicated, gapped and interleaved arrival never yields a wrong transition."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from tests.data.data_builders import make_step
from tether.data import StepPairer, StepRecord


def feed(pairer: StepPairer, steps: list[StepRecord]) -> list:
    out = []
    for step in steps:
        out.extend(pairer.add(step))
    return out


def assert_consecutive(transitions: list) -> None:
    for t in transitions:
        # observation[2] is the step index the step was built with
        assert t.observation[2] == t.step_index
        assert t.next_observation[2] == t.step_index + 1
        assert t.reward == t.step_index + 0.5  # reward of action t arrives with step t+1
        assert t.next_ingress_ns == t.ingress_ns + 1_000_000


@st.composite
def jittered_arrival(draw: st.DrawFn) -> tuple[int, list[int], int]:
    """An episode of ``n`` steps whose arrival order is shuffled by at most 3 places, with repeats."""
    n = draw(st.integers(2, 60))
    keys = [i + draw(st.floats(0, 3)) for i in range(n)]
    order = sorted(range(n), key=lambda i: keys[i])
    dups = draw(st.lists(st.integers(0, n - 1), max_size=10))
    arrival = list(order)
    for d in dups:
        arrival.insert(draw(st.integers(arrival.index(d) + 1, len(arrival))), d)
    return n, arrival, len(dups)


@settings(max_examples=150, deadline=None)
@given(jittered_arrival())
def test_shuffled_and_duplicated_arrival_pairs_every_step_exactly_once(
    case: tuple[int, list[int], int],
) -> None:
    n, arrival, n_dups = case
    pairer = StepPairer(reorder_window_steps=8)
    out = feed(pairer, [make_step(i, last=i == n - 1) for i in arrival])
    assert sorted(t.step_index for t in out) == list(range(n - 1))
    assert_consecutive(out)
    stats = pairer.stats()
    assert stats.duplicates == n_dups
    assert stats.missing == 0
    assert stats.episodes_ended == 1
    assert stats.transitions == n - 1
    assert [t.terminated for t in sorted(out, key=lambda t: t.step_index)] == [False] * (n - 2) + [
        True
    ]


@settings(max_examples=100, deadline=None)
@given(st.integers(5, 40), st.data())
def test_a_gap_is_counted_and_never_bridged(n: int, data: st.DataObject) -> None:
    lost = data.draw(st.sets(st.integers(1, n - 2), min_size=1, max_size=3))
    pairer = StepPairer(reorder_window_steps=4)
    out = feed(pairer, [make_step(i) for i in range(n) if i not in lost])
    out.extend(pairer.end_session("s0"))
    assert_consecutive(out)
    for t in out:
        assert t.step_index not in lost
        assert t.step_index + 1 not in lost
    expected = sum(1 for i in range(n - 1) if i not in lost and i + 1 not in lost)
    assert len(out) == expected
    assert pairer.stats().missing == len(lost)


def test_a_step_that_arrives_after_its_gap_was_given_up_is_late() -> None:
    pairer = StepPairer(reorder_window_steps=2)
    out = feed(pairer, [make_step(i) for i in (0, 1, 3, 4, 5)])  # 2 is given up at 5
    assert [t.step_index for t in out] == [0, 3, 4]
    assert feed(pairer, [make_step(2)]) == []
    stats = pairer.stats()
    assert (stats.missing, stats.late, stats.duplicates) == (1, 1, 0)


def test_steps_after_the_terminal_step_are_counted_not_paired() -> None:
    pairer = StepPairer()
    out = feed(pairer, [make_step(0), make_step(1, last=True), make_step(2), make_step(3)])
    assert [t.step_index for t in out] == [0]
    assert out[0].terminated
    assert pairer.stats().after_end == 2


def test_human_override_becomes_the_executed_action() -> None:
    pairer = StepPairer()
    out = feed(pairer, [make_step(0, checks=4), make_step(1, override=True)])
    (t,) = out
    np.testing.assert_array_equal(t.action, np.full(3, -0.5, dtype=np.float32))
    np.testing.assert_array_equal(t.proposed_action, make_step(0).proposed_action)
    assert t.action_source == "human"
    assert t.safety_checks == 4


def test_interleaved_sessions_and_new_episodes_do_not_mix() -> None:
    pairer = StepPairer()
    steps = []
    for i in range(10):
        steps += [make_step(i, session="a"), make_step(i, session="b", episode="x")]
    steps += [make_step(0, session="a", episode="e1"), make_step(1, session="a", episode="e1")]
    steps += [make_step(10, session="a")]  # straggler of the abandoned episode
    out = feed(pairer, steps)
    assert_consecutive(out)
    by_key = {(t.session_id, t.episode_id) for t in out}
    assert by_key == {("a", "e0"), ("b", "x"), ("a", "e1")}
    assert len(out) == 9 + 9 + 1
    stats = pairer.stats()
    assert stats.episodes_abandoned == 1
    assert stats.late == 1
    assert stats.open_episodes == 2


def test_first_step_index_above_zero_counts_the_steps_before_it_as_missing() -> None:
    pairer = StepPairer(reorder_window_steps=3)
    out = feed(pairer, [make_step(i) for i in range(5, 12)])
    assert [t.step_index for t in out] == list(range(5, 11))
    assert pairer.stats().missing == 5


def test_shapes_that_disagree_are_refused_and_counted() -> None:
    pairer = StepPairer()
    good, bad = make_step(0), make_step(1)
    wrong = bad._replace(observation=np.zeros(2, np.float32))
    assert feed(pairer, [good, wrong]) == []
    assert pairer.stats().malformed == 1


def test_an_unknown_action_source_is_refused_and_counted() -> None:
    pairer = StepPairer()
    assert feed(pairer, [make_step(0, source="autopilot"), make_step(1)]) == []
    assert pairer.stats().malformed == 1


def test_storage_codes_cover_exactly_the_safety_layers_action_sources() -> None:
    from tether.data import ACTION_SOURCES
    from tether.safety import ActionSource

    assert set(ACTION_SOURCES) == {s.value for s in ActionSource}


def test_a_transition_takes_each_field_from_the_right_step() -> None:
    """Every field of a transition, by name, from the step it belongs to (the pairer builds
    transitions positionally: a swapped field would pass every other test here)."""
    step = make_step(0, session="s9", episode="e9", source="clipped", checks=5)._replace(
        truncated=False, client_timestamp_ns=11
    )
    nxt = make_step(1, session="s9", episode="e9", last=True)
    (t,) = feed(StepPairer(), [step, nxt])
    expected = {
        "session_id": "s9",
        "robot_id": "robot-s9",
        "episode_id": "e9",
        "step_index": 0,
        "reward": nxt.reward,
        "terminated": True,
        "truncated": False,
        "action_source": "clipped",
        "safety_checks": 5,
        "policy_version": step.policy_version,
        "weights_sha256": step.weights_sha256,
        "ingress_ns": step.ingress_ns,
        "next_ingress_ns": nxt.ingress_ns,
        "client_timestamp_ns": 11,
    }
    assert {name: getattr(t, name) for name in expected} == expected
    assert t.observation is step.observation
    assert t.next_observation is nxt.observation
    assert t.proposed_action is step.proposed_action
    assert t.action is step.safe_action
