"""The degradation machine: each robot's NORMAL → RESTRICTED → PAUSED → TAKEOVER and back.

Every robot has its own level, driven only by its own evidence: the supervisor's verdicts
on its steps, the watchdog misses its own session reports, its faults. Step evidence is
judged as a rate, the fraction of that robot's own steps in its sliding window (once the
window holds ``min_window_steps``, so a robot's first steps cannot trip it); faults and
gate events as counts. A robot's level is the most degraded one whose thresholds its
window reaches; moving there is immediate. Moving back is one level per quiet period (no
trigger for ``quiet_period_s``), never out of TAKEOVER: only :meth:`resume` with an
operator name leaves it, and it forgets the window so old events cannot re-trigger.

The learning-wide level (may the learner publish, may it train) aggregates the robots:
it is the worst level that more than ``fleet_degraded_fraction`` of the counted robots
are at, so with the default one robot, or one client, never decides for the others. A
robot counts while it stepped within the window or is above NORMAL.

Corrections the supervisor makes below NORMAL are made under tightened limits, so they
are partly the tightening's own work: a correction made at a level counts only toward
levels beyond it, never toward holding that level or re-entering it. Otherwise a policy
that entered RESTRICTED for its correction rate is corrected even more often under the
halved limits and can never be quiet again, or is sent straight back by those same
corrections the moment it returns to NORMAL. A canary's and its control's steps are
supervised under tightened limits at NORMAL too (``observe(..., tightened=True)``), and
count as if made at RESTRICTED.

``observe_batch`` counts one engine batch's steps under one lock, as consecutive
``observe`` calls would. A robot at NORMAL whose window reaches no threshold is the
common step: the machine keeps, per robot, the fewest window steps its counts need for
every rate to stay below its threshold, raised by each event it records, so such a step
is not judged threshold by threshold.

Invariants: every level change is a :class:`DegradationTransition` naming its robot (or
None for the learning-wide level), kept in a bounded history, counted per policy version
and passed to every listener; no call about one robot changes another robot's level; the
machine's clock is injected, so tests drive time instead of sleeping. Thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence

from tether.safety.degradation_config import RATE_FIELDS, DegradationConfig
from tether.safety.errors import DegradationError
from tether.safety.levels import DegradationLevel, DegradationTransition, EventKind, WindowCounts
from tether.safety.limits import SafetyLimits
from tether.safety.verdict import (
    NON_FINITE_BIT as _NON_FINITE,
    PASSED,
    TAKEOVER_BIT as _TAKEOVER,
    ActionSource,
    SafetyCheck,
    SafetyVerdict,
)

log = logging.getLogger(__name__)

Listener = Callable[[DegradationTransition], None]
# The robot of a caller that names none: a single-robot machine, or stateless GetAction.
DEFAULT_ROBOT = ""
_SINGLE_CHECKS = tuple(c for c in SafetyCheck if c is not SafetyCheck.NONE)
_KINDS = tuple(EventKind)
_KIND_INDEX = {kind: i for i, kind in enumerate(_KINDS)}
# The event tuples observe() records, built once.
_INTERVENTION = (_KIND_INDEX[EventKind.INTERVENTION],)
_BACKUP = (_KIND_INDEX[EventKind.BACKUP_ACTION],)
_BACKUP_NAN = (_KIND_INDEX[EventKind.BACKUP_ACTION], _KIND_INDEX[EventKind.NAN_OUTPUT])
_WORST_FIRST = tuple(reversed(DegradationLevel))[:-1]  # TAKEOVER, PAUSED, RESTRICTED
# Why a robot's window reaches a level: a template and its values (``_target``).
_Why = tuple[str, tuple[object, ...]]
_COUNT_WHY = "{} {} events in {} s (threshold {})"
_RATE_WHY = "{} {} events in the robot's {} steps of the last {} s ({:.1%}, threshold {:.1%})"
_CHECK_WHY = (
    "{} {} interventions in the robot's {} steps of the last {} s ({:.1%}, threshold {:.1%})"
)


class DegradationMachine:
    """See the module docstring. ``clock`` returns monotonic seconds."""

    def __init__(
        self,
        config: DegradationConfig | None = None,
        *,
        limits: SafetyLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or DegradationConfig()
        self._limits = limits
        self._tightened = (
            None if limits is None else limits.tightened(self.config.restricted_tighten_factor)
        )
        self._clock = clock
        self._lock = threading.RLock()
        self._rules = _rules(self.config)
        # What a new event can change in _quiet_steps (see there): the kinds with a count
        # threshold, and per kind and per check bit its rate thresholds.
        self._counted = frozenset(i for _, counts, _, _ in self._rules for i, _ in counts)
        self._rates_of: dict[int, list[tuple[int, float]]] = {}
        self._check_rates_of: dict[int, list[tuple[int, float]]] = {}
        for level, _, rates, check_rates in self._rules:
            for index, rate in rates:
                self._rates_of.setdefault(index, []).append((int(level), rate))
            for bit, _, rate in check_rates:
                self._check_rates_of.setdefault(bit, []).append((int(level), rate))
        self._ruled_bits = sum(self._check_rates_of)
        self._min_steps = self.config.min_window_steps
        self._robots: dict[str, _Robot] = {}
        self._fleet = DegradationLevel.NORMAL
        self._version: int | None = None
        self._history: deque[DegradationTransition] = deque(maxlen=self.config.history_size)
        self._per_version: Counter[tuple[int | None, DegradationLevel]] = Counter()
        self._listeners: list[Listener] = []
        self._fleet_listeners: list[Listener] = []

    # ---- inputs -------------------------------------------------------------------------

    def observe(
        self,
        verdict: SafetyVerdict,
        *,
        policy_version: int | None = None,
        tightened: bool = False,
        robot: str = DEFAULT_ROBOT,
    ) -> None:
        """Count one of ``robot``'s steps and what the supervisor did to its action;
        ``tightened``: it enforced tightened limits whatever the level (a canary's or its
        control's step)."""
        fired: list[DegradationTransition] = []
        with self._lock:
            if policy_version is not None:
                self._version = policy_version
            self._observe_one(robot, verdict, tightened, fired)
        self._notify(fired)

    def observe_batch(
        self,
        robots: Sequence[str],
        verdicts: Sequence[SafetyVerdict],
        tightened: Sequence[bool],
        *,
        policy_version: int | None = None,
    ) -> None:
        """``observe(verdicts[i], policy_version=..., tightened=tightened[i],
        robot=robots[i])`` for each row in turn (one engine batch), under one lock: the
        same transitions in the same order; listeners hear them after the last row."""
        if not len(robots) == len(verdicts) == len(tightened):
            raise DegradationError(
                f"observe_batch needs one verdict and one tightened flag per robot "
                f"({len(robots)}); got {len(verdicts)} and {len(tightened)}"
            )
        fired: list[DegradationTransition] = []
        with self._lock:
            if policy_version is not None:
                self._version = policy_version
            observe = self._observe_one
            known = self._robots
            clock = self._clock
            window = self.config.window_s
            fewest = self._min_steps
            normal = DegradationLevel.NORMAL
            popleft = deque.popleft
            for robot, verdict, tight in zip(robots, verdicts, tightened, strict=True):
                state = known.get(robot)
                if verdict is not PASSED or state is None or state.level is not normal:
                    observe(robot, verdict, tight, fired)
                    continue
                # _observe_one for the common step, inline: a passed step of a robot at
                # NORMAL whose window loses no event and reaches no threshold (its oldest
                # steps leave the window here, as _evict drops them).
                now = clock()
                steps = state.steps
                steps.append(now)
                state.last_seen = now
                horizon = now - window
                while steps[0] <= horizon:
                    popleft(steps)
                events = state.events
                need = state.quiet_steps
                held = len(steps)
                if (
                    (not events or events[0][0] > horizon)
                    and need is not None
                    and need >= 0
                    and (held < fewest or held >= need)
                ):
                    state.calm_since = None
                    state.hot_at = now
                else:
                    self._advance(state, now, fired)
        self._notify(fired)

    def _observe_one(
        self,
        robot: str,
        verdict: SafetyVerdict,
        tightened: bool,
        fired: list[DegradationTransition],
    ) -> None:
        """One step of ``observe`` (the lock held, the version set)."""
        now = self._clock()
        state = self._robots.get(robot)
        if state is None:
            state = self._state(robot)
        state.steps.append(now)
        state.last_seen = now
        if verdict is not PASSED:
            # Plain ints: IntFlag arithmetic costs about a microsecond per operation, and
            # this runs for every step.
            checks = int(verdict.checks)
            # At TAKEOVER the backup in control is the consequence, not a new symptom.
            if not checks & _TAKEOVER:
                if verdict.source is ActionSource.BACKUP:
                    kinds = _BACKUP_NAN if checks & _NON_FINITE else _BACKUP
                    self._record(state, kinds, 0, now)
                elif verdict.source is ActionSource.CLIPPED:
                    self._record(state, _INTERVENTION, checks, now, correction=True,
                                 tightened=tightened)  # fmt: skip
        self._advance(state, now, fired)

    def report(
        self, kind: EventKind, *, policy_version: int | None = None, robot: str = DEFAULT_ROBOT
    ) -> None:
        """Count an event of ``robot``'s from outside the supervisor (a watchdog miss its
        session reported, a fault, a gate event)."""
        self.report_many(kind, 1, policy_version=policy_version, robot=robot)

    def report_many(
        self,
        kind: EventKind,
        count: int,
        *,
        policy_version: int | None = None,
        robot: str = DEFAULT_ROBOT,
    ) -> None:
        """``report`` ``count`` times at once (the caller has bounded ``count``)."""
        if count <= 0:
            return
        fired: list[DegradationTransition] = []
        with self._lock:
            now = self._clock()
            state = self._state(robot)
            if policy_version is not None:
                self._version = policy_version
            self._record(state, (_KIND_INDEX[kind],), 0, now, times=count)
            self._advance(state, now, fired)
        self._notify(fired)

    def set_policy_version(self, version: int) -> None:
        """The version now serving; transitions name it."""
        with self._lock:
            self._version = version

    def escalate(self, level: DegradationLevel, *, reason: str, robot: str | None = None) -> None:
        """Move ``robot`` (None: every known robot) to ``level`` now if it is more degraded
        (an operator's pause, an e-stop)."""
        fired: list[DegradationTransition] = []
        with self._lock:
            now = self._clock()
            names = [robot] if robot is not None else list(self._robots) or [DEFAULT_ROBOT]
            for name in names:
                state = self._state(name)
                self._advance(state, now, fired)
                if level > state.level:
                    self._move(state, level, f"escalated: {reason}", now, None, None, fired)
                    state.calm_since = None
            self._update_fleet(now, fired)
        self._notify(fired)

    def resume(
        self, *, operator: str, reason: str = "operator resume", robot: str | None = None
    ) -> DegradationTransition:
        """Leave TAKEOVER for ``config.resume_level``: ``robot``, or every robot in TAKEOVER
        (None); the caller has authenticated ``operator``. Returns the first transition."""
        if not operator.strip():
            raise DegradationError(
                "resume needs the authenticated operator's name, got an empty string; "
                "pass operator=<who resumed>"
            )
        fired: list[DegradationTransition] = []
        with self._lock:
            now = self._clock()
            if robot is not None:
                state = self._robots.get(robot)
                level = DegradationLevel.NORMAL if state is None else state.level
                if state is None or level is not DegradationLevel.TAKEOVER:
                    raise DegradationError(
                        f"resume is only valid in TAKEOVER, but robot {robot!r} is at "
                        f"{level.name}; lower levels recover by themselves after the quiet "
                        "period"
                    )
                targets = [state]
            else:
                targets = [s for s in self._robots.values() if s.level is DegradationLevel.TAKEOVER]
                if not targets:
                    raise DegradationError(
                        "resume is only valid in TAKEOVER, but no robot is in TAKEOVER "
                        f"({self._levels_text()}); lower levels recover by themselves after "
                        "the quiet period"
                    )
            for state in targets:
                # Events before the resume led to the takeover; counting them again would
                # send the robot straight back into it.
                state.forget()
                self._move(state, self.config.resume_level, reason, now, None, operator, fired)
                state.calm_since = now
            self._update_fleet(now, fired, operator)
        self._notify(fired)
        return fired[0]

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener`` with every future robot transition (after the state changed)."""
        with self._lock:
            self._listeners.append(listener)

    def add_fleet_listener(self, listener: Listener) -> None:
        """Call ``listener`` with every future change of the learning-wide level."""
        with self._lock:
            self._fleet_listeners.append(listener)

    # ---- queries ------------------------------------------------------------------------

    @property
    def level(self) -> DegradationLevel:
        """The learning-wide level, after letting every degraded robot recover up to now.

        A robot at NORMAL is judged on its own steps only: judged again while idle, its
        window would lose its clean old steps before its recent events and show a rate
        it never had."""
        fired: list[DegradationTransition] = []
        with self._lock:
            now = self._clock()
            for state in list(self._robots.values()):
                if state.level is not DegradationLevel.NORMAL:
                    self._advance(state, now, fired, fleet=False)
            self._update_fleet(now, fired)
            level = self._fleet
        self._notify(fired)
        return level

    def level_of(self, robot: str) -> DegradationLevel:
        """``robot``'s own level as of its last step (NORMAL for a robot never seen).

        Cheap enough for every step: a degradation is made by the call that caused it, so
        only a recovery on the clock is seen one step late.
        """
        state = self._robots.get(robot)
        return DegradationLevel.NORMAL if state is None else state.level

    def robot_levels(self) -> dict[str, DegradationLevel]:
        """Every known robot's level."""
        with self._lock:
            return {name: state.level for name, state in self._robots.items()}

    def may_publish(self) -> bool:
        """Whether the learner may publish a new version (learning-wide level NORMAL)."""
        return self.level is DegradationLevel.NORMAL

    def may_train(self) -> bool:
        """Whether the learner may keep updating (NORMAL and RESTRICTED)."""
        return self.level <= DegradationLevel.RESTRICTED

    def policy_in_control(self, robot: str = DEFAULT_ROBOT) -> bool:
        """False in TAKEOVER: serving sends the supervisor's backup action to ``robot``."""
        self.level  # noqa: B018  (brings the windows up to now)
        return self.level_of(robot) < DegradationLevel.TAKEOVER

    def limits_for(self, level: DegradationLevel) -> SafetyLimits:
        """The limits the supervisor enforces at ``level``: tightened below NORMAL."""
        if self._limits is None or self._tightened is None:
            raise DegradationError(
                "limits_for needs the base limits; construct DegradationMachine(limits=...)"
            )
        return self._limits if level is DegradationLevel.NORMAL else self._tightened

    def counts(self, robot: str = DEFAULT_ROBOT) -> WindowCounts:
        """What ``robot``'s window holds now."""
        with self._lock:
            state = self._robots.get(robot)
            if state is None:
                state = _Robot()
            else:
                self._evict(state, self._clock())
            everything = state.below[-1]
            return WindowCounts(
                window_s=self.config.window_s,
                by_kind=tuple(zip(_KINDS, everything.by_kind, strict=True)),
                interventions_by_check=tuple(
                    (str(c.name), everything.by_check[int(c)])
                    for c in _SINGLE_CHECKS
                    if everything.by_check.get(int(c))
                ),
                steps=len(state.steps),
            )

    def history(self) -> tuple[DegradationTransition, ...]:
        """Recent robot transitions and learning-wide ones, oldest first."""
        with self._lock:
            return tuple(self._history)

    def transitions_for(self, policy_version: int | None) -> dict[DegradationLevel, int]:
        """How many times a robot entered each level while ``policy_version`` was serving."""
        with self._lock:
            return {level: n for (v, level), n in self._per_version.items() if v == policy_version}

    # ---- internals ----------------------------------------------------------------------

    def _state(self, robot: str) -> _Robot:
        state = self._robots.get(robot)
        if state is None:
            if len(self._robots) >= self.config.max_robots:
                self._forget_one()
            state = self._robots[robot] = _Robot(robot)
        return state

    def _forget_one(self) -> None:
        """Drop the robot idle longest, preferring one at NORMAL; a robot in TAKEOVER is
        dropped only when every kept robot is in TAKEOVER (and that is logged)."""
        by_idle = sorted(self._robots.values(), key=lambda s: s.last_seen)
        for wanted in (DegradationLevel.NORMAL, DegradationLevel.RESTRICTED,
                       DegradationLevel.PAUSED, DegradationLevel.TAKEOVER):  # fmt: skip
            for state in by_idle:
                if state.level is wanted:
                    if wanted is DegradationLevel.TAKEOVER:
                        log.warning(
                            "degradation: forgetting robot %r in TAKEOVER, %d robots are kept "
                            "(degradation.max_robots)",
                            state.name,
                            self.config.max_robots,
                        )
                    del self._robots[state.name]
                    return

    def _record(
        self,
        state: _Robot,
        kinds: tuple[int, ...],
        checks: int,
        now: float,
        *,
        correction: bool = False,
        tightened: bool = False,
        times: int = 1,
    ) -> None:
        """Count ``kinds`` now. A ``correction`` counts only toward levels beyond the one
        whose limits it was made under: the current level, or RESTRICTED if ``tightened``."""
        floor = 0
        if correction:
            floor = max(int(state.level), int(DegradationLevel.RESTRICTED) if tightened else 0)
        below = state.below
        bits = _bits_of(checks)
        for kind in kinds:
            state.events.append((now, kind, checks, floor, times))
            for tally in below[floor + 1 :]:
                # tally.add(kind, checks, times), inline: it runs for every correction
                tally.by_kind[kind] += times
                by_check = tally.by_check
                for bit in bits:
                    by_check[bit] = by_check.get(bit, 0) + times
        need = state.quiet_steps
        if need is None or need < 0:
            return  # unknown, or a count threshold met already: _advance judges in full
        # The counts grew: only the thresholds on these kinds and check bits, at the levels
        # this event counts toward, can need more steps now.
        for kind in kinds:
            if kind in self._counted:
                state.quiet_steps = None
                return
            for level, rate in self._rates_of.get(kind, ()):
                if level > floor:
                    need = max(need, _steps_beyond(below[level].by_kind[kind], rate))
        for bit in _bits_of(checks & self._ruled_bits):
            for level, rate in self._check_rates_of[bit]:
                if level > floor:
                    need = max(need, _steps_beyond(below[level].by_check.get(bit, 0), rate))
        state.quiet_steps = need

    def _evict(self, state: _Robot, now: float) -> None:
        horizon = now - self.config.window_s
        steps = state.steps
        while steps and steps[0] <= horizon:
            steps.popleft()
        events = state.events
        while events and events[0][0] <= horizon:
            at, kind, checks, floor, times = events.popleft()
            bits = _bits_of(checks)
            for tally in state.below[floor + 1 :]:
                # tally.add(kind, checks, -times), inline: it runs for every correction
                tally.by_kind[kind] -= times
                by_check = tally.by_check
                for bit in bits:
                    by_check[bit] -= times
            state.evicted_until = at + self.config.window_s

    def _quiet_steps(self, state: _Robot) -> int:
        """The fewest steps the robot's window, with the counts it holds now, must hold for
        every rate to stay below its threshold (-1: a count threshold is met already).

        So ``_target`` finds NORMAL exactly when this is not -1 and the window holds fewer
        than ``min_window_steps`` steps (rates not judged) or at least this many. The
        counts only grow between two calls by ``_record``, which raises the answer for the
        thresholds it touched; evictions only lower the true answer, so a kept one errs
        on the side of judging in full."""
        below = state.below
        need = 0
        for level, counts, rates, check_rates in self._rules:
            tally = below[level]
            by_kind = tally.by_kind
            for index, count in counts:
                if by_kind[index] >= count:
                    return -1
            for index, rate in rates:
                need = max(need, _steps_beyond(by_kind[index], rate))
            for bit, _, rate in check_rates:
                need = max(need, _steps_beyond(tally.by_check.get(bit, 0), rate))
        return need

    def _target(self, state: _Robot) -> tuple[DegradationLevel, _Why, EventKind | None]:
        """The most degraded level the robot's window reaches, and why (a template and its
        values, formatted only when the level moves: a degraded robot is judged on every
        look at the learning-wide level)."""
        steps = len(state.steps)
        judged = steps >= self.config.min_window_steps
        window = self.config.window_s
        for level, counts, rates, checks in self._rules:
            tally = state.below[level]
            by_kind = tally.by_kind
            for index, need in counts:
                if by_kind[index] >= need:
                    kind = _KINDS[index]
                    return level, (_COUNT_WHY, (by_kind[index], kind.value, window, need)), kind
            if not judged:
                continue
            for index, rate in rates:
                have = by_kind[index]
                if have >= rate * steps:
                    kind = _KINDS[index]
                    why = (kind.value, steps, window, have / steps, rate)
                    return level, (_RATE_WHY, (have, *why)), kind
            for bit, name, rate in checks:
                have = tally.by_check.get(bit, 0)
                if have >= rate * steps:
                    why = (name, steps, window, have / steps, rate)
                    return level, (_CHECK_WHY, (have, *why)), EventKind.INTERVENTION
        return DegradationLevel.NORMAL, ("", ()), None

    def _advance(
        self, state: _Robot, now: float, fired: list[DegradationTransition], *, fleet: bool = True
    ) -> None:
        self._evict(state, now)
        if state.level is DegradationLevel.NORMAL:
            # The common step: a robot at NORMAL whose window reaches no threshold stays
            # there (what _target would find, without judging every threshold again).
            steps = len(state.steps)
            need = state.quiet_steps
            if need is None or not (need >= 0 and (steps < self._min_steps or steps >= need)):
                need = state.quiet_steps = self._quiet_steps(state)
            if need >= 0 and (steps < self._min_steps or steps >= need):
                state.calm_since = None
                state.hot_at = now
                return
        target, why, trigger = self._target(state)
        before = len(fired)
        if target > state.level:
            template, values = why
            self._move(state, target, template.format(*values), now, trigger, None, fired)
        if target >= state.level:
            state.calm_since = None
            state.hot_at = now
        else:
            if state.calm_since is None:
                # Calm since the window last lost an event (or the level last changed, or a
                # look found it at its level), not since this call: a late poll must not
                # lengthen the quiet period.
                state.calm_since = min(
                    now, max(state.evicted_until, state.changed_at, state.hot_at)
                )
            quiet = self.config.quiet_period_s
            # One level per quiet period; a late call catches up with the levels it missed.
            while (
                state.level is not DegradationLevel.TAKEOVER
                and state.level > target
                and now - state.calm_since >= quiet
            ):
                state.calm_since += quiet
                self._move(state, DegradationLevel(state.level - 1), f"quiet for {quiet} s",
                           state.calm_since, None, None, fired)  # fmt: skip
        if fleet and len(fired) > before:
            self._update_fleet(now, fired)

    def _update_fleet(
        self, now: float, fired: list[DegradationTransition], operator: str | None = None
    ) -> None:
        """Recompute the learning-wide level from the robots' levels (``operator``: whose
        resume moved them)."""
        horizon = now - self.config.window_s
        counted = [
            s.level
            for s in self._robots.values()
            if s.level is not DegradationLevel.NORMAL or s.last_seen > horizon
        ]
        share = self.config.fleet_degraded_fraction
        target, why = DegradationLevel.NORMAL, "no robot's level is above NORMAL"
        for level in _WORST_FIRST:
            at_least = sum(1 for lv in counted if lv >= level)
            if at_least and at_least > share * len(counted):
                target = level
                why = (
                    f"{at_least} of {len(counted)} robots at {level.name} or worse "
                    f"(more than {share:.0%} decide)"
                )
                break
        if target is self._fleet:
            return
        record = DegradationTransition(
            self._fleet, target, why, now, self._version, operator=operator
        )
        self._fleet = target
        self._history.append(record)
        fired.append(record)

    def _move(
        self,
        state: _Robot,
        level: DegradationLevel,
        reason: str,
        at: float,
        trigger: EventKind | None,
        operator: str | None,
        fired: list[DegradationTransition],
    ) -> None:
        record = DegradationTransition(
            state.level, level, reason, at, self._version, trigger, operator, state.name
        )
        state.level = level
        state.changed_at = at
        self._history.append(record)
        self._per_version[(self._version, level)] += 1
        fired.append(record)

    def _levels_text(self) -> str:
        counts = Counter(s.level.name for s in self._robots.values())
        return ", ".join(f"{n} {name}" for name, n in sorted(counts.items())) or "no robots"

    def _notify(self, fired: list[DegradationTransition]) -> None:
        if not fired:
            return
        for record in fired:
            who = "learning-wide" if record.robot_id is None else f"robot {record.robot_id!r}"
            log.log(
                logging.WARNING if record.is_degradation else logging.INFO,
                "degradation: %s %s -> %s: %s",
                who,
                record.from_level.name,
                record.to_level.name,
                record.reason,
            )
        with self._lock:
            listeners = list(self._listeners)
            fleet_listeners = list(self._fleet_listeners)
        for record in fired:
            for listener in listeners if record.robot_id is not None else fleet_listeners:
                listener(record)


class _Robot:
    """One robot's window and level."""

    __slots__ = ("below", "calm_since", "changed_at", "events", "evicted_until", "hot_at",
                 "last_seen", "level", "name", "quiet_steps", "steps")  # fmt: skip

    def __init__(self, name: str = DEFAULT_ROBOT) -> None:
        self.name = name
        self.level = DegradationLevel.NORMAL
        self.last_seen = float("-inf")
        self.changed_at = float("-inf")
        self.hot_at = float("-inf")  # the last time its window was seen at its level
        self.calm_since: float | None = None
        self.forget()

    def forget(self) -> None:
        """Empty the window (an operator's resume)."""
        # (time, kind index, check bits, floor, times): a correction made at a level counts
        # only toward levels beyond it (its floor); every other event has floor NORMAL.
        self.events: deque[tuple[float, int, int, int, int]] = deque()
        self.steps: deque[float] = deque()  # the robot's step times in the window
        self.below = _tallies()
        # The latest moment the window lost an event: the counts may have been at a
        # threshold until then.
        self.evicted_until = float("-inf")
        # DegradationMachine._quiet_steps for the counts held (never below the true value),
        # or None when not known.
        self.quiet_steps: int | None = None


class _Tally:
    """Events in the window by kind (indexed as ``_KINDS``), and interventions by check bit."""

    __slots__ = ("by_check", "by_kind")

    def __init__(self) -> None:
        self.by_kind = [0] * len(_KINDS)
        self.by_check: dict[int, int] = {}

    def add(self, kind: int, checks: int, sign: int) -> None:
        self.by_kind[kind] += sign
        by_check = self.by_check
        for bit in _bits_of(checks):
            by_check[bit] = by_check.get(bit, 0) + sign


_BITS: dict[int, tuple[int, ...]] = {}


def _bits_of(checks: int) -> tuple[int, ...]:
    """The single bits set in ``checks``, lowest first (kept per value: few occur)."""
    bits = _BITS.get(checks)
    if bits is None:
        found = []
        rest = checks
        while rest:
            bit = rest & -rest
            found.append(bit)
            rest ^= bit
        bits = _BITS.setdefault(checks, tuple(found))
    return bits


def _steps_beyond(have: int, rate: float) -> int:
    """The fewest steps ``s`` with ``have >= rate * s`` false (``rate`` > 0): ``_target``'s
    own comparison, which is monotonic in ``s``."""
    steps = int(have / rate)
    while have >= rate * steps:
        steps += 1
    while steps > 0 and not have >= rate * (steps - 1):
        steps -= 1
    return steps


def _tallies() -> list[_Tally]:
    """Index ``L``: the events that count toward level ``L`` (floor below ``L``); the last
    one, beyond every level, holds everything in the window."""
    return [_Tally() for _ in range(len(DegradationLevel) + 1)]


_Rule = tuple[
    DegradationLevel,
    tuple[tuple[int, int], ...],  # counted kinds: (kind index, count)
    tuple[tuple[int, float], ...],  # rate kinds: (kind index, fraction of steps)
    tuple[tuple[int, str, float], ...],  # per check: (check bit, check name, fraction)
]


def _rules(config: DegradationConfig) -> tuple[_Rule, ...]:
    """Each level's enabled thresholds, most degraded first."""
    return tuple(
        (
            level,
            tuple((i, t.count(k)) for i, k in enumerate(_KINDS) if t.count(k)),
            tuple((i, t.rate(k)) for i, k in enumerate(_KINDS) if k in RATE_FIELDS and t.rate(k)),
            tuple(
                (int(SafetyCheck[name]), name, rate)
                for name, rate in t.per_check_rate.items()
                if rate
            ),
        )
        for level, t in reversed(config.by_level())
    )
