"""Pairing: shuffled, duplicated, gapped and interleaved arrival never yields a wrong transition.

The pairer answers with pairs of row references; the tests turn them into transitions
the way the recorder does (its ``_BlockStore`` gathers the columns of every pair), so
each assertion is about the transitions a sink receives.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.data.data_builders import ACT_DIM, OBS_DIM, CollectingSink, make_step
from tether.data import (
    AnsweredSteps,
    PairingStats,
    Recorder,
    StepBlock,
    StepPairer,
    StepRecord,
    Transition,
)
from tether.data.pairing import Pairs
from tether.data.recorder import RecorderStats, _BlockStore


class Paired:
    """A :class:`StepPairer` fed and read the way the recorder's worker does: each block
    kept in a ``_BlockStore`` under the reference of its first row, the pairs gathered
    into transitions, and the blocks no live step needs any more forgotten."""

    def __init__(self, reorder_window_steps: int = 8) -> None:
        self.pairer = StepPairer(reorder_window_steps)
        self.store = _BlockStore()

    def add_blocks(self, blocks: Sequence[StepBlock]) -> list[Transition]:
        """One wake of the worker: every block in order, then one gather."""
        pairs = Pairs()
        for block in blocks:
            self.pairer.add_block(block, self.store.add(block), pairs)
        return self._gather(pairs)

    def add(self, steps: Sequence[StepRecord]) -> list[Transition]:
        """Each step as a block of its own, in the order given."""
        return self.add_blocks([StepBlock.from_records([step]) for step in steps])

    def end_session(self, session_id: str) -> list[Transition]:
        pairs = Pairs()
        self.pairer.end_session(session_id, pairs)
        return self._gather(pairs)

    def stats(self) -> PairingStats:
        return self.pairer.stats()

    def _gather(self, pairs: Pairs) -> list[Transition]:
        assert len(pairs.held) == len(pairs.nexts)
        out = self.store.gather(pairs).transitions() if len(pairs) else []
        self.store.keep(self.pairer.live_refs())
        return out


def feed(paired: Paired, steps: list[StepRecord]) -> list[Transition]:
    return paired.add(steps)


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
    pairer = Paired(reorder_window_steps=8)
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
    pairer = Paired(reorder_window_steps=4)
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
    pairer = Paired(reorder_window_steps=2)
    out = feed(pairer, [make_step(i) for i in (0, 1, 3, 4, 5)])  # 2 is given up at 5
    assert [t.step_index for t in out] == [0, 3, 4]
    assert feed(pairer, [make_step(2)]) == []
    stats = pairer.stats()
    assert (stats.missing, stats.late, stats.duplicates) == (1, 1, 0)


def test_steps_after_the_terminal_step_are_counted_not_paired() -> None:
    pairer = Paired()
    out = feed(pairer, [make_step(0), make_step(1, last=True), make_step(2), make_step(3)])
    assert [t.step_index for t in out] == [0]
    assert out[0].terminated
    assert pairer.stats().after_end == 2


def test_human_override_becomes_the_executed_action() -> None:
    pairer = Paired()
    out = feed(pairer, [make_step(0, checks=4), make_step(1, override=True)])
    (t,) = out
    np.testing.assert_array_equal(t.action, np.full(3, -0.5, dtype=np.float32))
    np.testing.assert_array_equal(t.proposed_action, make_step(0).proposed_action)
    assert t.action_source == "human"
    assert t.safety_checks == 4


def test_interleaved_sessions_and_new_episodes_do_not_mix() -> None:
    pairer = Paired()
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
    pairer = Paired(reorder_window_steps=3)
    out = feed(pairer, [make_step(i) for i in range(5, 12)])
    assert [t.step_index for t in out] == list(range(5, 11))
    assert pairer.stats().missing == 5


def record_and_collect(
    steps: Sequence[StepRecord],
) -> tuple[list[bool], list[Transition], RecorderStats]:
    """Record ``steps`` one by one on a real recorder; what each record() answered, what
    its sink received once every session ended, and its stats."""
    sink = CollectingSink()
    with Recorder([sink]) as recorder:
        accepted = [recorder.record(step) for step in steps]
        for session in sorted({step.session_id for step in steps}):
            recorder.end_session(session)
        assert recorder.flush()
        stats = recorder.stats()
    return accepted, sink.received, stats


@pytest.mark.parametrize(
    "wrong",
    [
        {"observation": np.zeros(2, np.float32)},  # another obs_dim than the first step's
        {"safe_action": np.zeros(ACT_DIM + 1, np.float32)},  # another act_dim
        {"proposed_action": np.zeros(ACT_DIM + 1, np.float32)},  # disagrees with safe_action
        {"executed_previous_action": np.zeros(ACT_DIM + 1, np.float32)},  # override's shape
        {"client_timestamp_ns": 2**63},  # beyond its int64 column
        {"ingress_ns": -(2**63) - 1},  # below it
    ],
    ids=["obs_dim", "act_dim", "proposed", "override", "stamp", "ingress"],
)
def test_shapes_that_disagree_are_refused_and_counted(wrong: dict[str, object]) -> None:
    """A step that does not fit the recorder's columns is refused before pairing and
    counted as malformed; the steps around it pair as if it had never been sent."""
    bad = make_step(1)._replace(**wrong)
    steps = [make_step(0), bad, make_step(1), make_step(2)]
    accepted, received, stats = record_and_collect(steps)
    assert accepted == [True] * 4  # record() only enqueues; the worker refuses it
    assert [t.step_index for t in received] == [0, 1]
    assert_consecutive(received)
    assert stats.pairing.malformed == 1
    assert stats.pairing.steps == 3  # the refused step never reached the pairer
    assert (stats.pairing.duplicates, stats.pairing.missing) == (0, 0)
    assert stats.pairing.transitions == 2


def test_an_unknown_action_source_is_refused_and_counted() -> None:
    steps = [make_step(0, source="autopilot"), make_step(1), make_step(2)]
    accepted, received, stats = record_and_collect(steps)
    assert accepted == [True] * 3  # record() only enqueues; the worker refuses it
    # step 0 never reached the pairer: its slot is a gap, not a transition with a guessed source
    assert [(t.step_index, t.action_source) for t in received] == [(1, "policy")]
    assert stats.pairing.malformed == 1
    assert stats.pairing.missing == 1
    assert stats.pairing.steps == 2


def test_a_block_of_other_dimensions_than_the_first_is_refused_whole() -> None:
    sink = CollectingSink()
    wide = [
        make_step(i, session="w")._replace(observation=np.zeros(OBS_DIM + 1, np.float32))
        for i in range(3)
    ]
    with Recorder([sink]) as recorder:
        assert recorder.record_steps(AnsweredSteps.from_records([make_step(0), make_step(1)]))
        assert recorder.record_steps(AnsweredSteps.from_records(wide))  # refused by the worker
        assert recorder.record_steps(AnsweredSteps.from_records([make_step(2)]))
        assert recorder.flush()
        stats = recorder.stats()
    assert [t.step_index for t in sink.received] == [0, 1]
    assert all(t.session_id == "s0" for t in sink.received)
    assert stats.pairing.malformed == 3  # counted in steps, not blocks
    assert stats.pairing.steps == 3


def test_storage_codes_cover_exactly_the_safety_layers_action_sources() -> None:
    from tether.data import ACTION_SOURCES
    from tether.safety import ActionSource

    assert set(ACTION_SOURCES) == {s.value for s in ActionSource}


def test_a_transition_takes_each_field_from_the_right_step() -> None:
    """Every field of a transition, by name, from the step it belongs to (the store
    gathers transitions column by column and builds them positionally: a swapped column
    would pass every other test here). Every field holds a value no other field holds."""
    step = make_step(3, session="s9", episode="e9", source="clipped", checks=5)._replace(
        robot_id="robot-9",
        observation=np.array([1, 2, 3, 4, 5], np.float32),
        proposed_action=np.array([0.1, 0.2, 0.3], np.float32),
        safe_action=np.array([0.4, 0.5, 0.6], np.float32),
        reward=-7.25,  # the reward of the action before step 3: not this transition's
        policy_version=13,
        weights_sha256="ef" * 32,
        ingress_ns=17,
        client_timestamp_ns=11,
    )
    nxt = make_step(4, session="s9", episode="e9", last=True)._replace(
        robot_id="robot-other",
        observation=np.array([6, 7, 8, 9, 10], np.float32),
        proposed_action=np.array([-0.1, -0.2, -0.3], np.float32),
        safe_action=np.array([-0.4, -0.5, -0.6], np.float32),
        action_source="backup",
        safety_checks=2,
        reward=2.5,
        policy_version=14,
        weights_sha256="01" * 32,
        ingress_ns=19,
        client_timestamp_ns=23,
    )
    paired = Paired()
    assert feed(paired, [make_step(i, session="s9", episode="e9") for i in range(3)]) != []
    (t,) = feed(paired, [step, nxt])[1:]  # the first joins step 2 to step 3
    expected = {
        "session_id": "s9",
        "robot_id": "robot-9",
        "episode_id": "e9",
        "step_index": 3,
        "reward": 2.5,
        "terminated": True,
        "truncated": False,
        "action_source": "clipped",
        "safety_checks": 5,
        "policy_version": 13,
        "weights_sha256": "ef" * 32,
        "ingress_ns": 17,
        "next_ingress_ns": 19,
        "client_timestamp_ns": 11,
    }
    assert {name: getattr(t, name) for name in expected} == expected
    np.testing.assert_array_equal(t.observation, step.observation)
    np.testing.assert_array_equal(t.next_observation, nxt.observation)
    np.testing.assert_array_equal(t.proposed_action, step.proposed_action)
    np.testing.assert_array_equal(t.action, step.safe_action)
    # the truncated flag too comes from the next step
    (u,) = feed(
        Paired(),
        [make_step(0), make_step(1)._replace(truncated=True)],
    )
    assert (u.terminated, u.truncated) == (False, True)


def as_key(t: Transition) -> tuple[object, ...]:
    """A transition as a comparable tuple (arrays as tuples of floats)."""
    return tuple(tuple(v.tolist()) if isinstance(v, np.ndarray) else v for v in t)


@st.composite
def interleaved_sessions(draw: st.DrawFn) -> tuple[list[StepRecord], list[int]]:
    """Steps of 1-4 sessions, one to three episodes each, jittered, duplicated, gapped,
    overridden and interleaved in one arrival order; and the sizes of the blocks that
    arrival is cut into."""
    steps_of: list[list[StepRecord]] = []
    for s in range(draw(st.integers(1, 4))):
        session: list[StepRecord] = []
        for e in range(draw(st.integers(1, 3))):
            n = draw(st.integers(1, 25))
            ends = draw(st.booleans())
            lost = draw(st.sets(st.integers(0, n - 1), max_size=2))
            keys = {i: i + draw(st.floats(0, 3)) for i in range(n) if i not in lost}
            order = sorted(keys, key=keys.__getitem__)
            for d in draw(st.lists(st.sampled_from(order), max_size=3)) if order else ():
                order.insert(draw(st.integers(order.index(d) + 1, len(order))), d)
            session += [
                make_step(
                    i,
                    session=f"s{s}",
                    episode=f"e{e}",
                    last=ends and i == n - 1,
                    override=draw(st.integers(0, 9)) == 0,
                    source=draw(st.sampled_from(["policy", "clipped", "backup"])),
                    checks=draw(st.integers(0, 15)),
                )
                for i in order
            ]
        steps_of.append(session)
    arrival: list[StepRecord] = []
    cursors = [0] * len(steps_of)
    while any(c < len(steps) for c, steps in zip(cursors, steps_of, strict=True)):
        s = draw(st.sampled_from([k for k, c in enumerate(cursors) if c < len(steps_of[k])]))
        arrival.append(steps_of[s][cursors[s]])
        cursors[s] += 1
    sizes: list[int] = []
    while sum(sizes) < len(arrival):
        sizes.append(draw(st.integers(1, len(arrival) - sum(sizes))))
    return arrival, sizes


@settings(max_examples=150, deadline=None)
@given(interleaved_sessions(), st.integers(1, 8))
def test_a_block_of_many_sessions_pairs_like_the_same_steps_one_at_a_time(
    case: tuple[list[StepRecord], list[int]], window: int
) -> None:
    arrival, sizes = case
    one_by_one = Paired(window)
    expected = feed(one_by_one, arrival)
    blocks: list[StepBlock] = []
    start = 0
    for size in sizes:
        blocks.append(StepBlock.from_records(arrival[start : start + size]))
        start += size
    in_blocks = Paired(window)
    got = []
    for block in blocks:  # a wake per block: the store forgets between them
        got += in_blocks.add_blocks([block])
    sessions = sorted({step.session_id for step in arrival})
    for session in sessions:
        expected += one_by_one.end_session(session)
        got += in_blocks.end_session(session)
    assert [as_key(t) for t in got] == [as_key(t) for t in expected]
    assert in_blocks.stats() == one_by_one.stats()
    assert in_blocks.stats().steps == len(arrival)
    assert_consecutive(got)
    for t in got:  # no transition crosses a session or an episode
        assert t.observation[:2].tolist() == t.next_observation[:2].tolist()


def test_a_human_override_becomes_the_action_through_the_columnar_gather() -> None:
    """executed_previous_action on the next step replaces the held step's action and
    source, within one block of several sessions and across blocks; the proposed action,
    the checks and the other sessions' transitions stay as they were."""
    pairer, store = StepPairer(), _BlockStore()
    first = StepBlock.from_records(
        [
            make_step(0, session="a", source="clipped", checks=4),
            make_step(0, session="b", source="backup"),
            make_step(1, session="a", override=True),  # overrides a's step 0, same block
            make_step(1, session="b"),
            make_step(2, session="a", source="clipped"),
        ]
    )
    second = StepBlock.from_records(
        [
            make_step(2, session="b", override=True),  # overrides b's step 1, an earlier block
            make_step(3, session="a"),
        ]
    )
    pairs = Pairs()
    pairer.add_block(first, store.add(first), pairs)
    pairer.add_block(second, store.add(second), pairs)
    table = store.gather(pairs)
    out = table.transitions()
    by_key = {(t.session_id, t.step_index): t for t in out}
    assert sorted(by_key) == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
    human = np.full(ACT_DIM, -0.5, dtype=np.float32)
    for key in [("a", 0), ("b", 1)]:
        t = by_key[key]
        np.testing.assert_array_equal(t.action, human)
        assert t.action_source == "human", key
        np.testing.assert_array_equal(t.proposed_action, make_step(key[1]).proposed_action)
    assert by_key[("a", 0)].safety_checks == 4  # the checks stay those of the server's action
    for key, source in [(("a", 1), "policy"), (("a", 2), "clipped"), (("b", 0), "backup")]:
        t = by_key[key]
        assert t.action_source == source, key
        np.testing.assert_array_equal(t.action, make_step(key[1]).safe_action)
    # the learner's view flags exactly the rows a person chose
    flags = table.arrays.batch_of(slice(None)).human.tolist()
    assert flags == [t.action_source == "human" for t in out]
    assert sum(flags) == 2
