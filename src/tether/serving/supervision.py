"""The safety side of serving: one supervisor per session, driven by the degradation level.

Every supervisor keeps per-robot state (where its robot was last seen), so each Control
session gets its own ``SessionSupervisor``; limits and kinematics are shared (immutable,
or used one batch at a time inside the batcher). Which supervisor a session gets (the
position supervisor on normalized actions for a position-commanded robot, the torque one
otherwise) is ``tether.safety.for_spec.supervisor_for``'s decision, never made here. The degradation machine decides what
the supervisor enforces: the base limits at NORMAL, the tightened ones below it, and at
TAKEOVER the backup action replaces the policy's. Every verdict is fed back to the
machine, with the version that proposed the action.

Invariant: ``decide`` is the only way serving turns a proposed action into one it may
send, and it always returns the output of the session supervisor's ``filter`` or
``backup_action`` (finite, within limits).

``decide_batch`` supervises one engine batch of sessions in one call, row for row as
``decide`` would (the position supervisors' rows through one ``filter_actions`` call,
and every verdict to the rows' shared degradation machine in one ``observe_batch``).

Each robot is supervised at its own level (``SessionSupervisor.level``, a plain read of
the machine's per-robot state), and only its own verdicts and watchdog misses feed that
level. ``SupervisorFactory.level`` is the learning-wide level (metrics, Describe); asking
the machine re-evaluates every robot's window, so it keeps the answer and asks again only
after the machine announced a change (its listener) or ``level_poll_s`` later.
"""

from __future__ import annotations

import operator
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple, cast

import numpy as np

from tether.safety.degradation import DEFAULT_ROBOT, DegradationMachine
from tether.safety.degradation_config import DegradationConfig
from tether.safety.for_spec import (
    SupervisionConfig,
    kinematics_for,
    limits_for,
    supervisor_for,
    unchecked_cartesian,
)
from tether.safety.kinematics import Kinematics
from tether.safety.levels import DegradationLevel, DegradationTransition, EventKind
from tether.safety.limits import SafetyLimits
from tether.safety.position.actions import PositionActionSupervisor
from tether.safety.position.batch import filter_actions
from tether.safety.supervises import ActionSupervisor
from tether.safety.verdict import SafetyVerdict
from tether.spec import RobotSpec


class SessionSupervisor:
    """One robot's supervisor at every degradation level (see the module docstring)."""

    def __init__(
        self,
        base: ActionSupervisor,
        degradation: DegradationMachine | None = None,
        robot: str = DEFAULT_ROBOT,
        *,
        under: Callable[[SafetyLimits], ActionSupervisor] | None = None,
    ) -> None:
        self._base = base
        self._degradation = degradation
        self.robot = robot  # whose level this supervisor follows and feeds, alone
        # A supervisor of this robot under other limits, with no robot state (the
        # factory's copies of prototypes; alone, one built from the base).
        self._under = under if under is not None else base.with_limits
        self._restricted: ActionSupervisor | None = None
        # (factor, its supervisor)
        self._canary: tuple[float, ActionSupervisor] | None = None
        # The supervisor that filtered the robot's last step: the next one, under other
        # limits, takes over its robot state (learnt load, last stop).
        self._active = base

    def _select(self, level: DegradationLevel, tightening: float) -> ActionSupervisor:
        """The supervisor for a step at ``level`` (taking over the robot's state)."""
        # The backup at TAKEOVER is the base supervisor's; below NORMAL the RESTRICTED one
        # filters every step, a canary's too (it is the tighter of the two).
        if level is DegradationLevel.TAKEOVER:
            supervisor = self._base
        elif level is not DegradationLevel.NORMAL:
            supervisor = self._tight()
        elif tightening < 1.0:
            supervisor = self._canary_supervisor(tightening)
        else:
            supervisor = self._base
        if supervisor is not self._active:
            supervisor.take_state(self._active)
            self._active = supervisor
        return supervisor

    def _observe(
        self, verdict: SafetyVerdict, supervisor: ActionSupervisor, policy_version: int
    ) -> None:
        if self._degradation is not None:
            self._degradation.observe(
                verdict,
                policy_version=policy_version,
                tightened=supervisor is not self._base,
                robot=self.robot,
            )

    def decide(
        self,
        observation: np.ndarray,
        proposed: np.ndarray,
        previous: np.ndarray | None,
        *,
        observation_age_s: float,
        level: DegradationLevel,
        policy_version: int,
        tightening: float = 1.0,
    ) -> tuple[np.ndarray, SafetyVerdict]:
        """Filter one action at ``level``; ``tightening`` < 1 (a canary's step, or its
        control's) applies ``SafetyLimits.tightened(tightening)`` at NORMAL."""
        supervisor = self._select(level, tightening)
        if level is DegradationLevel.TAKEOVER:
            action, verdict = supervisor.backup_action(observation, previous)
        else:
            action, verdict = supervisor.filter(
                observation, proposed, previous, observation_age_s=observation_age_s
            )
        self._observe(verdict, supervisor, policy_version)
        return action, verdict

    def level(self) -> DegradationLevel:
        """This robot's own level: the one its next step is supervised at."""
        if self._degradation is None:
            return DegradationLevel.NORMAL
        return self._degradation.level_of(self.robot)

    def watchdog_misses(self, count: int, policy_version: int | None, *, session_step: int) -> None:
        """A client's watchdog misses count towards its own robot's level, except in a
        session's first ``session_warmup_steps`` steps (start-up, not the policy); the
        caller has bounded ``count`` by the steps the session sent."""
        if self._degradation is not None:
            if session_step <= self._degradation.config.session_warmup_steps:
                return
            self._degradation.report_many(
                EventKind.WATCHDOG_MISS, count, policy_version=policy_version, robot=self.robot
            )

    def _canary_supervisor(self, tightening: float) -> ActionSupervisor:
        if self._canary is None or self._canary[0] != tightening:
            self._canary = (tightening, self._under(self._base.limits.tightened(tightening)))
        return self._canary[1]

    def _tight(self) -> ActionSupervisor:
        if self._restricted is None:
            if self._degradation is not None:
                limits = self._degradation.limits_for(DegradationLevel.RESTRICTED)
            else:  # a canary on a server without a degradation machine
                limits = self._base.limits.tightened(DegradationConfig().restricted_tighten_factor)
            self._restricted = self._under(limits)
        return self._restricted


class SupervisedRow(NamedTuple):
    """One row of :func:`decide_batch`: a session's step, as ``decide`` takes it."""

    session: SessionSupervisor
    observation: np.ndarray
    previous: np.ndarray | None
    observation_age_s: float
    level: DegradationLevel
    tightening: float = 1.0


_session_of = operator.attrgetter("session")

# From this many rows decide_batch runs the position rows through the array path; below,
# one ``decide`` per row. The shipped arm's closed loop, µs per row, decide vs the array
# path: 1 row 11.3 vs 29.3, 3 rows 11.3 vs 12.7, 4 rows 11.3 vs 10.8, 8 rows 10.9 vs 6.6
# (docs/benchmarks.md, 2026-12-06 morning).
ARRAY_ROWS = 4


def decide_batch(
    rows: Sequence[SupervisedRow],
    proposed: np.ndarray,
    policy_version: int,
    observations: np.ndarray | None = None,
) -> list[tuple[np.ndarray, SafetyVerdict]]:
    """``rows[i].session.decide(...)`` for every row of one engine batch (``proposed``:
    its actions, float32 (rows, act_dim); ``observations``, if given: the rows'
    observations as one float array, row ``i`` equal to ``rows[i].observation``), bit for
    bit and in the same order of degradation events. In a batch of ``ARRAY_ROWS`` or more
    the position supervisors' rows run in one compiled call
    (``tether.safety.position.batch.filter_actions``), every other row (TAKEOVER, the
    torque supervisor) as ``decide`` runs it; a smaller batch runs ``decide`` row by row."""
    count = len(rows)
    if not count:
        return []
    if count < ARRAY_ROWS or len(set(map(id, map(_session_of, rows)))) < count:
        # A small batch: one decide per row costs less than the array path's set-up. A
        # session met twice (never in serving: one step per robot per batch) filters its
        # rows in turn, as consecutive decide calls would.
        return [
            row.session.decide(
                row.observation,
                proposed[i],
                row.previous,
                observation_age_s=row.observation_age_s,
                level=row.level,
                policy_version=policy_version,
                tightening=row.tightening,
            )
            for i, row in enumerate(rows)
        ]
    results: list[tuple[np.ndarray, SafetyVerdict] | None] = [None] * count
    # Each row's supervisor, and the position rows (batched: their indices).
    chosen: list[ActionSupervisor] = []
    batched: list[int] = []
    machine = rows[0].session._degradation
    shared = machine is not None  # every row's session feeds this one machine
    normal, takeover = DegradationLevel.NORMAL, DegradationLevel.TAKEOVER
    for i, row in enumerate(rows):
        session = row.session
        level = row.level
        if level is normal and not row.tightening < 1.0 and session._active is session._base:
            supervisor = session._base  # _select's answer for the common step, without the call
        else:
            supervisor = session._select(level, row.tightening)
        chosen.append(supervisor)
        if session._degradation is not machine:
            shared = False
        if level is takeover:
            results[i] = supervisor.backup_action(row.observation, row.previous)
        elif isinstance(supervisor, PositionActionSupervisor):
            batched.append(i)
        else:
            results[i] = supervisor.filter(
                row.observation, proposed[i], row.previous, observation_age_s=row.observation_age_s
            )
    if batched:
        every = len(batched) == count  # serving's common batch: every row a position row
        picked = rows if every else [rows[i] for i in batched]
        if observations is not None and not every:
            observations = observations[batched]
        answers = filter_actions(
            cast(list[PositionActionSupervisor], chosen if every else [chosen[i] for i in batched]),
            [row.observation for row in picked] if observations is None else observations,
            proposed if every else proposed[batched],
            [row.previous for row in picked],
            [row.observation_age_s for row in picked],
        )
        if every:
            results = cast(list[tuple[np.ndarray, SafetyVerdict] | None], answers)
        else:
            for i, answer in zip(batched, answers, strict=True):
                results[i] = answer
    out = cast(list[tuple[np.ndarray, SafetyVerdict]], results)
    # Every row's verdict to its session's degradation machine, in row order: one call
    # when the rows share one machine (serving's case).
    if shared:
        assert machine is not None
        machine.observe_batch(
            [row.session.robot for row in rows],
            [verdict for _, verdict in out],
            [
                supervisor is not row.session._base
                for row, supervisor in zip(rows, chosen, strict=True)
            ],
            policy_version=policy_version,
        )
    else:
        for row, supervisor, result in zip(rows, chosen, out, strict=True):
            row.session._observe(result[1], supervisor, policy_version)
    return out


# One control period at 50 Hz: how late serving may notice a recovery (never a degradation).
LEVEL_POLL_S = 0.02


class SupervisorFactory:
    """Makes ``SessionSupervisor``s for one robot spec; owns the shared limits."""

    def __init__(
        self,
        spec: RobotSpec,
        *,
        limits: SafetyLimits | None = None,
        kinematics: Kinematics | None = None,
        degradation: DegradationMachine | None = None,
        level_poll_s: float = LEVEL_POLL_S,
        supervision: SupervisionConfig | None = None,
    ) -> None:
        self.spec = spec
        self.limits = limits if limits is not None else limits_for(spec)
        self.supervision = supervision if supervision is not None else SupervisionConfig()
        self.kinematics = kinematics if kinematics is not None else kinematics_for(spec)
        # Limits declared and checked by nothing (no kinematics for this robot), in words.
        self.unchecked = unchecked_cartesian(spec, self.limits, self.kinematics)
        self.degradation = degradation
        self._level = _LevelCache(degradation, level_poll_s)
        self.kernel_warm_s = 0.0  # seconds the kernel took to compile or load here
        if spec.command_interface == "position":
            # Compile the position supervisor's kernel (or load it from numba's cache) now,
            # at server start, so the first session's first step does not pay for it.
            from tether.safety.position import kernel

            self.kernel_warm_s = kernel.warm()
        self._prototype = supervisor_for(
            spec, self.limits, kinematics=self.kinematics, supervision=self.supervision
        )
        # One built supervisor per set of limits a session may be supervised under (the
        # base, RESTRICTED's, a canary's); the sessions get fresh() copies (``under``).
        self._prototypes: dict[SafetyLimits, ActionSupervisor] = {self.limits: self._prototype}
        self._prototypes_lock = threading.Lock()

    def __call__(self, robot: str = DEFAULT_ROBOT) -> SessionSupervisor:
        """A supervisor for one of ``robot``'s sessions, at ``robot``'s own level: a fresh
        copy of one built at start-up (a session open runs on the event loop, and a fleet
        failing over opens many at once)."""
        return SessionSupervisor(self._prototype.fresh(), self.degradation, robot, under=self.under)

    def under(self, limits: SafetyLimits) -> ActionSupervisor:
        """A supervisor enforcing ``limits``, with no robot state: a ``fresh()`` copy of one
        built once per distinct limits (on the event loop a build costs ~0.27 ms, a copy
        ~10 µs, and a fleet's sessions switch to RESTRICTED or a canary's limits together;
        ``bench_supervisor.py --session-open``)."""
        return self._prototype_for(limits).fresh()

    def _prototype_for(self, limits: SafetyLimits) -> ActionSupervisor:
        prototype = self._prototypes.get(limits)
        if prototype is None:
            with self._prototypes_lock:
                prototype = self._prototypes.get(limits)
                if prototype is None:
                    prototype = self._prototype.with_limits(limits)
                    self._prototypes[limits] = prototype
        return prototype

    def level(self) -> DegradationLevel:
        """The learning-wide degradation level now (see the module docstring)."""
        return self._level.read()


class _LevelCache:
    """The machine's level, re-read after each announced transition or ``poll_s`` later."""

    def __init__(self, machine: DegradationMachine | None, poll_s: float) -> None:
        self._machine = machine
        self._poll_s = poll_s
        self._lock = threading.Lock()
        self._announced = 0  # transitions the machine announced
        self._seen = -1  # ``_announced`` when ``_cached`` was read; -1: never read
        self._cached = DegradationLevel.NORMAL
        self._next_poll = 0.0
        if machine is not None:
            machine.add_fleet_listener(self._on_transition)

    def _on_transition(self, transition: DegradationTransition) -> None:
        # Runs after the machine changed state; any reader that looked before will differ.
        self._announced += 1

    def read(self) -> DegradationLevel:
        if self._machine is None:
            return DegradationLevel.NORMAL
        if self._seen == self._announced and time.monotonic() < self._next_poll:
            return self._cached
        with self._lock:  # one reader refreshes at a time, so none writes back an old level
            announced = self._announced  # before reading: a later transition forces a re-read
            level = self._machine.level
            self._cached = level
            self._seen = announced
            self._next_poll = time.monotonic() + self._poll_s
        return level


SupervisorSource = Callable[[], SessionSupervisor]
