"""A robot's state moves between its supervisor and its slot without changing a bit.

The batch path and the action level's compiled single call keep a robot's state in its
slot (``tether.safety.position.states``); a per-row single call, ``take_state`` and a
backup action bring it back first. Two fleets see the same rounds: one fleet one call per
robot always, the other, per robot and round, either a single call (compiled, or a
float64 proposal taking the per-row path) or a row of one batch call, now and then a
backup action or a move to a fresh supervisor (``take_state``). Every answer and every robot's state after it must
match to the bit; and without the move back (``_pull`` made a no-op) the mixed fleet
must go wrong, so the test can fail.
"""

from __future__ import annotations

import copy
import gc
import math
from typing import Any

import numpy as np
import pytest

from safety import position_corpus as corpus
from safety.random_commands import ARMS, random_command_run
from safety.test_position_batch import fleet, rounds
from safety.test_position_equivalence import same
from tether.safety.for_spec import supervisor_for
from tether.safety.position import PositionActionSupervisor, kernel
from tether.safety.position.batch import filter_actions, filter_commands
from tether.safety.position.states import states_for
from tether.sim import ArmEnv, ArmEnvConfig, arm_spec

pytestmark = pytest.mark.skipif(not kernel.AVAILABLE, reason="the slots serve the compiled path")


def mixed_run(kind: int, rows: int, count: int, seed: int, *, unguarded: bool = False) -> int:
    """Rounds of the mixed fleet against the single-call fleet; rows compared.
    ``unguarded``: the mixed fleet's supervisors never move their state back (``_pull``
    a no-op on each of them, which their fresh() copies inherit)."""
    rng = np.random.default_rng(seed)
    singles, mixed = fleet(rows, seed, kind), fleet(rows, seed, kind)
    if unguarded:
        for supervisor in mixed:
            for level in (supervisor, getattr(supervisor, "position", supervisor)):
                level._pull = lambda: None
    last_single: list[Any] = [None] * rows
    last_mixed: list[Any] = [None] * rows
    compared = 0
    for obs, proposals, prev_kinds, ages in rounds(rows, count, seed + 1, kind):
        how = rng.choice(
            ["batch", "single", "wide", "backup", "move"], size=rows, p=[0.5, 0.2, 0.15, 0.05, 0.1]
        )
        # "wide": a float64 proposal, which the action level's compiled single call leaves
        # to the per-row path (the position level has only that one); both fleets get it.
        proposals = [
            p.astype(np.float64) if way == "wide" else p
            for p, way in zip(proposals, how, strict=True)
        ]
        want, got = [], [None] * rows
        for i in range(rows):
            if how[i] == "move":
                # A new supervisor continues the robot (a change of level does this).
                singles[i] = _moved(singles[i])
                mixed[i] = _moved(mixed[i])
            prev = last_single[i] if prev_kinds[i] == corpus.PREV_LAST else None
            if how[i] == "backup":
                want.append(singles[i].backup_action(obs[i], prev))
            else:
                want.append(
                    singles[i].filter(obs[i], proposals[i], prev, observation_age_s=ages[i])
                )
        previous = [
            last_mixed[i] if prev_kinds[i] == corpus.PREV_LAST else None for i in range(rows)
        ]
        batched = [i for i in range(rows) if how[i] in ("batch", "move")]
        for i in range(rows):
            if how[i] in ("single", "wide"):
                got[i] = mixed[i].filter(
                    obs[i], proposals[i], previous[i], observation_age_s=ages[i]
                )
            elif how[i] == "backup":
                got[i] = mixed[i].backup_action(obs[i], previous[i])
        pick = [mixed[i] for i in batched]
        if kind == corpus.POSITION:
            answers = filter_commands(
                pick,
                [obs[i] for i in batched],
                [proposals[i] for i in batched],
                [previous[i] for i in batched],
                [ages[i] for i in batched],
            )
        else:
            answers = filter_actions(
                pick,
                [obs[i] for i in batched],
                np.stack([proposals[i] for i in batched]),
                [previous[i] for i in batched],
                [ages[i] for i in batched],
            )
        for i, answer in zip(batched, answers, strict=True):
            got[i] = answer
        for i in range(rows):
            assert same(got[i], want[i]), (i, how[i], got[i], want[i])
            assert state_of(mixed[i]) == state_of(singles[i]), (i, how[i])
            compared += 1
        last_single = [w[0] for w in want]
        last_mixed = [g[0] for g in got]
    return compared


def state_of(supervisor: Any) -> tuple[Any, ...]:
    """A supervisor's robot state, read where it is kept (its slot or itself), moving
    nothing."""
    action: tuple[Any, ...] = ()
    if isinstance(supervisor, PositionActionSupervisor):
        position = supervisor.position
        slot, states = position._slot, position._states
        if slot >= 0 and states.action_here[slot]:
            held = bool(states.has_action[slot])
            action = (
                states.action32[slot].tobytes() if held else b"",
                states.command32[slot].tobytes() if held else None,
            )
        else:
            command = supervisor._last_command
            action = (supervisor._last_bytes, None if command is None else command.tobytes())
        supervisor = position
    slot, states = supervisor._slot, supervisor._states
    if slot >= 0 and states.here[slot]:
        held = bool(states.has_last[slot])
        return (
            *action,
            (states.candidate[slot].tolist(), states.change[slot].tolist()) if held else None,
            states.out32[slot].tobytes() if held else b"",
            states.pose[slot].tolist() if states.has_pose[slot] else None,
            states.anchors[slot].tobytes(),
            states.sag[slot].tolist(),
            states.rest_sag[slot].tolist(),
            states.earlier_sag[slot].tolist(),
            states.rest_pose[slot].tolist(),
        )
    return (
        *action,
        supervisor._last,
        supervisor._last_bytes,
        supervisor._last_pose,
        supervisor._anchors.tobytes(),
        supervisor._sag,
        supervisor._rest_sag,
        supervisor._earlier_sag,
        supervisor._rest_pose,
    )


def _moved(supervisor: Any) -> Any:
    other = supervisor.fresh()
    other.take_state(supervisor)
    return other


@pytest.mark.parametrize("kind", [corpus.POSITION, corpus.ACTIONS])
@np.errstate(over="ignore")
def test_single_batch_backup_and_moved_calls_mix_to_the_bit(kind: int) -> None:
    assert mixed_run(kind, 48, 30, 5) == 48 * 30


@pytest.mark.parametrize("kind", [corpus.POSITION, corpus.ACTIONS])
@np.errstate(over="ignore")
def test_without_moving_the_state_back_the_mixed_fleet_goes_wrong(kind: int) -> None:
    with pytest.raises(AssertionError):
        mixed_run(kind, 48, 30, 5, unguarded=True)


def test_slots_grow_past_their_first_capacity_and_are_reused_once_collected() -> None:
    prototype = corpus.make_supervisor(corpus.ACTIONS, 1.0, True)
    states = prototype.position._states
    assert states is not None
    assert states is states_for(prototype.position._signature, 0, ())
    rows = states.capacity + 40
    robots = [prototype.fresh() for _ in range(rows)]
    rng = np.random.default_rng(3)
    q = np.clip(rng.normal(0.0, 0.3, (rows, 4)), corpus.LOW, corpus.HIGH)
    obs = [corpus.observation(q[i], np.zeros(4)) for i in range(rows)]
    actions = rng.uniform(-0.2, 0.2, (rows, 4)).astype(np.float32)
    first = filter_actions(robots, obs, actions, [None] * rows)
    slots = {r.position._slot for r in robots}
    assert len(slots) == rows
    assert min(slots) >= 0
    assert states.capacity >= rows
    # The second round steers from each robot's own last command, held in its slot.
    again = filter_actions(robots, obs, actions, [a for a, _ in first])
    singles = [prototype.fresh() for _ in range(rows)]
    for i, single in enumerate(singles):
        single.filter(obs[i], actions[i])
        want = single.filter(obs[i], actions[i], first[i][0])
        assert same(again[i], want)
    held = states.in_use
    del robots, first, again
    gc.collect()
    assert states.in_use == held - rows
    newcomers = [prototype.fresh() for _ in range(rows)]
    filter_actions(newcomers, obs, actions, [None] * rows)
    assert {r.position._slot for r in newcomers} <= slots | set(range(states.capacity))
    assert states.in_use == held


def test_a_reused_slot_starts_empty() -> None:
    prototype = corpus.make_supervisor(corpus.ACTIONS, 1.0, True)
    obs = [corpus.observation(np.full(4, 0.1), np.zeros(4)) for _ in range(8)]
    actions = np.full((8, 4), 0.3, np.float32)
    robots = [prototype.fresh() for _ in range(8)]
    answers = filter_actions(robots, obs, actions, [None] * 8)
    previous = [a for a, _ in answers]
    del robots
    gc.collect()
    # New robots handed the old robots' last actions: not their own, so steered as
    # foreign previous actions exactly as a single call steers them.
    newcomers = [prototype.fresh() for _ in range(8)]
    got = filter_actions(newcomers, obs, actions, previous)
    for i in range(8):
        want = prototype.fresh().filter(obs[i], actions[i], previous[i])
        assert same(got[i], want)


def test_every_field_of_a_robot_state_moves_to_its_slot_and_back() -> None:
    """A drifted arm that rested at several places (its sag, both places' offsets, where
    the latest began: all set) has its state pushed to its slot, its attributes spoilt,
    and the state pulled back: the slot holds every field, and the pull restores every
    one. A field ``_push`` or ``_pull`` forgot keeps the slot's cleared or the spoilt
    value."""
    supervisor = supervisor_for(arm_spec("position"))
    random_command_run(ARMS["drifted"], supervisor, 400, seed=0)
    position = supervisor.position
    position._pull()
    before = state_of(position)
    assert all(map(any, (position._sag, position._rest_sag, position._earlier_sag)))
    assert all(map(math.isfinite, position._rest_pose))
    states, slot = position._states, position._slot
    with states.lock:  # the slot's old values gone: only what _push writes is there
        states.wide[slot] = 0.0
        states.out32[slot] = 0.0
        states.anchors[slot] = 0.0
        states.has_last[slot] = states.has_pose[slot] = False
        position._push()
    spoilt = [9.0] * len(position._sag)
    position._last, position._last_bytes, position._last_pose = None, b"", None
    position._sag = position._rest_sag = position._earlier_sag = position._rest_pose = spoilt
    position._anchors = kernel.new_anchors(len(spoilt))
    assert state_of(position) == before
    position._pull()
    assert state_of(position) == before


@pytest.mark.parametrize("level", ["action", "position"])
def test_a_deep_copy_continues_the_robot_on_its_own(level: str) -> None:
    """``copy.deepcopy`` of a supervisor mid-run answers the rest of the run as the
    original does, bit for bit, while a third copy is driven elsewhere between its steps:
    the copies share no slot and no memory."""
    spec = arm_spec("position")
    action_level = supervisor_for(spec)
    assert isinstance(action_level, PositionActionSupervisor)
    supervisor: Any = action_level if level == "action" else action_level.position
    rng = np.random.default_rng(4)
    env = ArmEnv(seed=4, config=ArmEnvConfig(command_interface="position"))
    obs, _ = env.reset()
    center, half = np.asarray(action_level._center), np.asarray(action_level._half)

    def proposal() -> np.ndarray:
        action = rng.uniform(-1.0, 1.0, 4).astype(np.float32)
        return action if level == "action" else (center + half * action).astype(np.float32)

    def to_env(out: np.ndarray) -> np.ndarray:
        return out if level == "action" else ((out - center) / half).astype(np.float32)

    previous = None
    for _ in range(150):
        previous, _ = supervisor.filter(obs, proposal(), previous)
        obs, *_ = env.step(to_env(previous))
    twin, elsewhere = copy.deepcopy(supervisor), copy.deepcopy(supervisor)
    twin_previous = previous
    stray = None
    for step in range(150):
        command = proposal()
        want, want_verdict = supervisor.filter(obs, command, previous)
        stray, _ = elsewhere.filter(obs + np.float32(0.05), proposal(), stray)
        got, got_verdict = twin.filter(obs, command, twin_previous)
        assert got.tobytes() == want.tobytes(), step
        assert got_verdict == want_verdict, step
        previous, twin_previous = want, got
        obs, *_ = env.step(to_env(want))
