"""The degradation machine: NORMAL → RESTRICTED → PAUSED → TAKEOVER and back.

Events (supervisor verdicts, watchdog misses, robot faults, gate rejections) are counted
in a sliding window. The level is the most degraded one whose thresholds the counts
reach; moving there is immediate. Moving back is one level per quiet period (no
trigger for ``quiet_period_s``), never out of TAKEOVER: only :meth:`resume` with an
operator name leaves it, and it forgets the window so old events cannot re-trigger.

Corrections the supervisor makes below NORMAL are made under tightened limits, so they
are partly the tightening's own work: a correction made at a level counts only toward
levels beyond it, never toward holding that level or re-entering it. Otherwise a policy
that entered RESTRICTED for its correction rate is corrected even more often under the
halved limits and can never be quiet again (seen in ``tether run``: RESTRICTED from the
first seconds to the end), or is sent straight back by those same corrections the
moment it returns to NORMAL. A canary's and its control's steps are supervised under
tightened limits at NORMAL too (``observe(..., tightened=True)``), and count as if made
at RESTRICTED.

Invariants: every level change is a :class:`DegradationTransition` in the bounded
history, counted per policy version, and passed to every listener; the machine's
clock is injected, so tests drive time instead of sleeping. Thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable

from tether.safety.degradation_config import DegradationConfig
from tether.safety.errors import DegradationError
from tether.safety.levels import DegradationLevel, DegradationTransition, EventKind, WindowCounts
from tether.safety.limits import SafetyLimits
from tether.safety.verdict import (
    NON_FINITE_BIT as _NON_FINITE,
    TAKEOVER_BIT as _TAKEOVER,
    ActionSource,
    SafetyCheck,
    SafetyVerdict,
)

Listener = Callable[[DegradationTransition], None]
_SINGLE_CHECKS = tuple(c for c in SafetyCheck if c is not SafetyCheck.NONE)
_KINDS = tuple(EventKind)
_KIND_INDEX = {kind: i for i, kind in enumerate(_KINDS)}
# The event tuples observe() records, built once.
_INTERVENTION = (_KIND_INDEX[EventKind.INTERVENTION],)
_BACKUP = (_KIND_INDEX[EventKind.BACKUP_ACTION],)
_BACKUP_NAN = (_KIND_INDEX[EventKind.BACKUP_ACTION], _KIND_INDEX[EventKind.NAN_OUTPUT])


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
        self._level = DegradationLevel.NORMAL
        # (time, kind index, check bits, floor): a correction made at a level counts only
        # toward levels beyond it (its floor); every other event has floor NORMAL.
        self._events: deque[tuple[float, int, int, int]] = deque()
        self._rules = _rules(self.config)
        self._below = _tallies()
        self._calm_since: float | None = None
        # Latest moments that were not calm: the last eviction from the window (the
        # counts may have been at a threshold until then) and the last level change.
        self._evicted_until = float("-inf")
        self._changed_at = float("-inf")
        self._version: int | None = None
        self._history: deque[DegradationTransition] = deque(maxlen=self.config.history_size)
        self._per_version: Counter[tuple[int | None, DegradationLevel]] = Counter()
        self._listeners: list[Listener] = []

    # ---- inputs -------------------------------------------------------------------------

    def observe(
        self, verdict: SafetyVerdict, *, policy_version: int | None = None, tightened: bool = False
    ) -> None:
        """Count what the supervisor did to one action; ``tightened``: it enforced
        tightened limits whatever the level (a canary's or its control's step)."""
        # Plain ints: IntFlag arithmetic costs about a microsecond per operation, and
        # this runs for every corrected action.
        checks = int(verdict.checks)
        if checks & _TAKEOVER:
            return  # the backup in control is the consequence, not a new symptom
        if verdict.source is ActionSource.BACKUP:
            kinds = _BACKUP_NAN if checks & _NON_FINITE else _BACKUP
            self._record(kinds, 0, policy_version)
        elif verdict.source is ActionSource.CLIPPED:
            self._record(
                _INTERVENTION, checks, policy_version, correction=True, tightened=tightened
            )

    def report(self, kind: EventKind, *, policy_version: int | None = None) -> None:
        """Count an event from outside the supervisor (watchdog miss, robot fault, gate)."""
        self._record((_KIND_INDEX[kind],), 0, policy_version)

    def set_policy_version(self, version: int) -> None:
        """The version now serving; transitions name it."""
        with self._lock:
            self._version = version

    def escalate(self, level: DegradationLevel, *, reason: str) -> None:
        """Move to ``level`` now if it is more degraded (an operator's pause, an e-stop)."""
        fired: list[DegradationTransition] = []
        with self._lock:
            now = self._clock()
            self._advance(now, fired)
            if level > self._level:
                self._move(level, f"escalated: {reason}", now, None, None, fired)
                self._calm_since = None
        self._notify(fired)

    def resume(self, *, operator: str, reason: str = "operator resume") -> DegradationTransition:
        """Leave TAKEOVER for ``config.resume_level``; the caller has authenticated ``operator``."""
        if not operator.strip():
            raise DegradationError(
                "resume needs the authenticated operator's name, got an empty string; "
                "pass operator=<who resumed>"
            )
        fired: list[DegradationTransition] = []
        with self._lock:
            if self._level is not DegradationLevel.TAKEOVER:
                raise DegradationError(
                    f"resume is only valid in TAKEOVER, but the level is {self._level.name}; "
                    "lower levels recover by themselves after the quiet period"
                )
            now = self._clock()
            # Events before the resume led to the takeover; counting them again would
            # send the robot straight back into it.
            self._events.clear()
            self._below = _tallies()
            self._move(self.config.resume_level, reason, now, None, operator, fired)
            self._calm_since = now
        self._notify(fired)
        return fired[0]

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener`` with every future transition (after the state changed)."""
        with self._lock:
            self._listeners.append(listener)

    # ---- queries ------------------------------------------------------------------------

    @property
    def level(self) -> DegradationLevel:
        fired: list[DegradationTransition] = []
        with self._lock:
            self._advance(self._clock(), fired)
            level = self._level
        self._notify(fired)
        return level

    def may_publish(self) -> bool:
        """Whether the learner may publish a new version (only at NORMAL)."""
        return self.level is DegradationLevel.NORMAL

    def may_train(self) -> bool:
        """Whether the learner may keep updating (NORMAL and RESTRICTED)."""
        return self.level <= DegradationLevel.RESTRICTED

    def policy_in_control(self) -> bool:
        """False in TAKEOVER: serving sends the supervisor's backup action instead."""
        return self.level < DegradationLevel.TAKEOVER

    def limits_for(self, level: DegradationLevel) -> SafetyLimits:
        """The limits the supervisor enforces at ``level``: tightened below NORMAL."""
        if self._limits is None or self._tightened is None:
            raise DegradationError(
                "limits_for needs the base limits; construct DegradationMachine(limits=...)"
            )
        return self._limits if level is DegradationLevel.NORMAL else self._tightened

    def counts(self) -> WindowCounts:
        with self._lock:
            self._evict(self._clock())
            everything = self._below[-1]
            return WindowCounts(
                window_s=self.config.window_s,
                by_kind=tuple(zip(_KINDS, everything.by_kind, strict=True)),
                interventions_by_check=tuple(
                    (str(c.name), everything.by_check[int(c)])
                    for c in _SINGLE_CHECKS
                    if everything.by_check.get(int(c))
                ),
            )

    def history(self) -> tuple[DegradationTransition, ...]:
        with self._lock:
            return tuple(self._history)

    def transitions_for(self, policy_version: int | None) -> dict[DegradationLevel, int]:
        """How many times each level was entered while ``policy_version`` was serving."""
        with self._lock:
            return {level: n for (v, level), n in self._per_version.items() if v == policy_version}

    # ---- internals ----------------------------------------------------------------------

    def _record(
        self,
        kinds: tuple[int, ...],
        checks: int,
        policy_version: int | None,
        *,
        correction: bool = False,
        tightened: bool = False,
    ) -> None:
        """Count ``kinds`` now. A ``correction`` counts only toward levels beyond the one
        whose limits it was made under: the current level, or RESTRICTED if ``tightened``."""
        fired: list[DegradationTransition] = []
        with self._lock:
            now = self._clock()
            if policy_version is not None:
                self._version = policy_version
            floor = 0
            if correction:
                floor = max(int(self._level), int(DegradationLevel.RESTRICTED) if tightened else 0)
            for kind in kinds:
                self._events.append((now, kind, checks, floor))
                for tally in self._below[floor + 1 :]:
                    tally.add(kind, checks, 1)
            self._advance(now, fired)
        self._notify(fired)

    def _evict(self, now: float) -> None:
        horizon = now - self.config.window_s
        while self._events and self._events[0][0] <= horizon:
            at, kind, checks, floor = self._events.popleft()
            for tally in self._below[floor + 1 :]:
                tally.add(kind, checks, -1)
            self._evicted_until = at + self.config.window_s

    def _target(self) -> tuple[DegradationLevel, str, EventKind | None]:
        """The most degraded level the window's counts reach, and why."""
        for level, kinds, checks in self._rules:
            tally = self._below[level]
            by_kind, by_check = tally.by_kind, tally.by_check
            for index, need in kinds:
                if by_kind[index] >= need:
                    kind = _KINDS[index]
                    return (
                        level,
                        f"{by_kind[index]} {kind.value} events in {self.config.window_s} s "
                        f"(threshold {need})",
                        kind,
                    )
            for bit, name, need in checks:
                have = by_check.get(bit, 0)
                if have >= need:
                    return (
                        level,
                        f"{have} {name} interventions in {self.config.window_s} s "
                        f"(threshold {need})",
                        EventKind.INTERVENTION,
                    )
        return DegradationLevel.NORMAL, "", None

    def _advance(self, now: float, fired: list[DegradationTransition]) -> None:
        self._evict(now)
        target, why, trigger = self._target()
        if target > self._level:
            self._move(target, why, now, trigger, None, fired)
        if target >= self._level:
            self._calm_since = None
            return
        if self._calm_since is None:
            # Calm since the window last lost an event (or the level last changed), not
            # since this call: a late poll must not lengthen the quiet period.
            self._calm_since = min(now, max(self._evicted_until, self._changed_at))
        quiet = self.config.quiet_period_s
        # One level per quiet period; a late call catches up with the levels it missed.
        while (
            self._level is not DegradationLevel.TAKEOVER
            and self._level > target
            and now - self._calm_since >= quiet
        ):
            self._calm_since += quiet
            self._move(
                DegradationLevel(self._level - 1),
                f"quiet for {quiet} s",
                self._calm_since,
                None,
                None,
                fired,
            )

    def _move(
        self,
        level: DegradationLevel,
        reason: str,
        at: float,
        trigger: EventKind | None,
        operator: str | None,
        fired: list[DegradationTransition],
    ) -> None:
        record = DegradationTransition(
            self._level, level, reason, at, self._version, trigger, operator
        )
        self._level = level
        self._changed_at = at
        self._history.append(record)
        self._per_version[(self._version, level)] += 1
        fired.append(record)

    def _notify(self, fired: list[DegradationTransition]) -> None:
        if not fired:
            return
        with self._lock:
            listeners = list(self._listeners)
        for record in fired:
            for listener in listeners:
                listener(record)


class _Tally:
    """Events in the window by kind (indexed as ``_KINDS``), and interventions by check bit."""

    __slots__ = ("by_check", "by_kind")

    def __init__(self) -> None:
        self.by_kind = [0] * len(_KINDS)
        self.by_check: dict[int, int] = {}

    def add(self, kind: int, checks: int, sign: int) -> None:
        self.by_kind[kind] += sign
        by_check = self.by_check
        while checks:
            bit = checks & -checks
            by_check[bit] = by_check.get(bit, 0) + sign
            checks ^= bit


def _tallies() -> list[_Tally]:
    """Index ``L``: the events that count toward level ``L`` (floor below ``L``); the last
    one, beyond every level, holds everything in the window."""
    return [_Tally() for _ in range(len(DegradationLevel) + 1)]


_Rule = tuple[DegradationLevel, tuple[tuple[int, int], ...], tuple[tuple[int, str, int], ...]]


def _rules(config: DegradationConfig) -> tuple[_Rule, ...]:
    """Each level's non-zero thresholds, most degraded first: (kind index, count) and
    (check bit, check name, count)."""
    return tuple(
        (
            level,
            tuple((i, t.threshold(k)) for i, k in enumerate(_KINDS) if t.threshold(k)),
            tuple(
                (int(SafetyCheck[name]), name, need) for name, need in t.per_check.items() if need
            ),
        )
        for level, t in reversed(config.by_level())
    )
