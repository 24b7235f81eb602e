"""A supervisor for a new robot made by ``fresh()`` decides what one built for it alone does.

Serving gives each session a fresh copy of a supervisor built at start-up
(``SupervisorFactory``): what the limits, gains and kinematics give is shared, the
robot's own state starts empty (the last command and its change, the last pose, the
kernel's anchors, the segment checks' remembered clearances, anchors and last segment,
the action map's last action). Copies of a prototype that has already supervised a
robot, run interleaved on other robots' closed sequences, must give every call, bit
for bit, what a supervisor constructed for that robot alone gives: on the compiled path
and on the Python path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.safety.test_position_equivalence import (
    HIGH,
    KINEMATICS,
    LIMITS,
    LOW,
    SPEC,
    VMAX,
    N,
    observation,
    random_state,
    same,
)
from tether.safety.levels import DegradationLevel
from tether.safety.position import PositionSupervisor, kernel
from tether.safety.position.actions import PositionActionSupervisor
from tether.safety.position.presets import arm_impedance
from tether.serving.supervision import SessionSupervisor, SupervisorFactory

ROBOTS = 4
STEPS = 400


def built_alone(compiled: bool) -> PositionActionSupervisor:
    position = PositionSupervisor(LIMITS, arm_impedance(), kinematics=KINEMATICS, compiled=compiled)
    return PositionActionSupervisor(position, SPEC)


class Robot:
    """One robot's sequence: consecutive states, actions near the last, previous actions
    handed back (now and then none), now and then a backup or an unreadable observation
    (always the first: a supervisor then falls back on the last pose it knows of, which
    for a new robot is none)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.q, self.v = random_state(self.rng)
        self.action = self.rng.uniform(-1.0, 1.0, N).astype(np.float32)
        self.steps = 0

    def next(self) -> tuple[np.ndarray, np.ndarray, bool, bool]:
        rng = self.rng
        self.q = np.clip(self.q + self.v * LIMITS.control_period_s, LOW - 0.1, HIGH + 0.1)
        self.v = np.clip(self.v + rng.normal(0.0, 0.3, N), -1.2 * VMAX, 1.2 * VMAX)
        if rng.random() < 0.1:
            self.action = rng.uniform(-1.2, 1.2, N).astype(np.float32)
        else:
            self.action = (self.action + rng.normal(0.0, 0.05, N)).astype(np.float32)
        obs = observation(self.q, self.v)
        if self.steps == 0 or rng.random() < 0.03:
            obs[rng.integers(N)] = np.nan
        self.steps += 1
        return obs, self.action, rng.random() < 0.9, rng.random() < 0.03


# How one supervisor answers one robot's step: (supervisor, observation, proposed action,
# previous action, backup wanted, step number) -> (action, verdict).
Call = Callable[[Any, np.ndarray, np.ndarray, "np.ndarray | None", bool, int], Any]


def filter_or_backup(
    supervisor: Any,
    obs: np.ndarray,
    action: np.ndarray,
    previous: np.ndarray | None,
    backup: bool,
    step: int,
) -> Any:
    if backup:
        return supervisor.backup_action(obs, previous)
    return supervisor.filter(obs, action, previous)


def drive(pairs: list[tuple[Any, Any]], seeds: list[int], call: Call = filter_or_backup) -> int:
    """Run each pair (supervisor under test, reference) on its own robot, interleaved
    step by step, each step through ``call``; every answer must be the same. Returns the
    calls compared."""
    robots = [Robot(seed) for seed in seeds]
    last: list[list[Any]] = [[None, None] for _ in pairs]
    calls = 0
    for step in range(STEPS):
        for k, ((tested, reference), robot) in enumerate(zip(pairs, robots, strict=True)):
            obs, action, hand_back, backup = robot.next()
            prev = last[k] if hand_back else [None, None]
            got = call(tested, obs, action, prev[0], backup, step)
            want = call(reference, obs, action, prev[1], backup, step)
            assert same(got, want), (k, calls, obs, action, got, want)
            last[k] = [got[0], want[0]]
            calls += 1
    return calls


@pytest.mark.parametrize(
    "compiled",
    [
        pytest.param(
            True, marks=pytest.mark.skipif(not kernel.AVAILABLE, reason="numba is absent")
        ),
        False,
    ],
)
def test_fresh_copies_of_a_used_supervisor_decide_as_ones_built_alone(compiled: bool) -> None:
    prototype = built_alone(compiled)
    assert prototype.position.compiled is compiled
    drive([(prototype, built_alone(compiled))], [99])  # the prototype has a robot's state
    copies = [prototype.fresh() for _ in range(ROBOTS)]
    assert all(c.position.compiled is compiled for c in copies)
    assert all(c._last_command is None and not c._last_bytes for c in copies)
    pairs = [(copy, built_alone(compiled)) for copy in copies]
    assert drive(pairs, list(range(ROBOTS))) == ROBOTS * STEPS
    # Nothing a robot keeps is shared between two copies or with the prototype.
    first, second = copies[0].position, copies[1].position
    assert first._segment is not second._segment
    assert first._segment._anchor is not second._segment._anchor
    assert first._segment._checks[0][1] is not second._segment._checks[0][1]
    assert first._anchors is not second._anchors
    assert first._anchors is not prototype.position._anchors


def test_a_factory_session_starts_with_no_robot_state() -> None:
    factory = SupervisorFactory(SPEC)
    used = factory("robot-a")
    drive([(used._base, built_alone(kernel.AVAILABLE))], [5])
    later = factory("robot-b")
    assert later._base is not used._base
    drive([(later._base, built_alone(kernel.AVAILABLE))], [6])


def test_sessions_under_restricted_and_canary_limits_decide_as_built_ones() -> None:
    """A factory's sessions take their RESTRICTED and canary supervisors as fresh copies of
    one built per limits; run interleaved on four robots, switching levels and canary
    tightening mid-sequence (the robot's state carried across each switch), they decide bit
    for bit what sessions whose supervisors were each built for their robot decide."""
    factory = SupervisorFactory(SPEC)
    warm = factory("robot-warm")  # the prototypes have supervised a robot already
    warm_robot = Robot(98)
    for level, tightening in ((DegradationLevel.RESTRICTED, 1.0), (DegradationLevel.NORMAL, 0.8)):
        obs, action, _, _ = warm_robot.next()
        decide(warm, obs, action, None, level, tightening)
    tested = [factory(f"robot-{k}") for k in range(ROBOTS)]
    reference = [SessionSupervisor(built_alone(kernel.AVAILABLE)) for _ in range(ROBOTS)]
    schedule = [
        (DegradationLevel.NORMAL, 1.0),
        (DegradationLevel.RESTRICTED, 1.0),
        (DegradationLevel.NORMAL, 0.8),
        (DegradationLevel.RESTRICTED, 0.8),
        (DegradationLevel.NORMAL, 1.0),
    ]

    def scheduled(
        session: SessionSupervisor,
        obs: np.ndarray,
        action: np.ndarray,
        previous: np.ndarray | None,
        backup: bool,
        step: int,
    ) -> tuple[np.ndarray, Any]:
        level, tightening = schedule[step * len(schedule) // STEPS]
        return decide(session, obs, action, previous, level, tightening)

    pairs = list(zip(tested, reference, strict=True))
    assert drive(pairs, list(range(ROBOTS)), scheduled) == ROBOTS * STEPS
    # Each session has its own restricted and canary supervisors, none a prototype.
    restricted = [s._restricted for s in tested]
    canaries = [s._canary[1] for s in tested if s._canary is not None]
    assert len(canaries) == ROBOTS
    prototypes = [factory._prototypes[s.limits] for s in (restricted[0], canaries[0])]
    made = [*restricted, *canaries, *prototypes]
    assert len({id(s) for s in made}) == len(made)


def decide(
    session: SessionSupervisor,
    obs: np.ndarray,
    action: np.ndarray,
    previous: np.ndarray | None,
    level: DegradationLevel,
    tightening: float,
) -> tuple[np.ndarray, Any]:
    return session.decide(
        obs,
        action,
        previous,
        observation_age_s=0.0,
        level=level,
        policy_version=1,
        tightening=tightening,
    )
