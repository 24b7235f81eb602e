"""The rollback monitor: a live version that degrades is replaced by the last-known-good one.

Each version's most recent episodes at the base limits are kept in a sliding window,
live's in a canary's control arm among them (a learner that publishes often keeps a
canary running much of the time, and live is watched through it). After every episode of
the live version the monitor compares its window with the last-known-good version's
window (recorded while *that* version was live), each metric with
``tether.versions.statistics.clearly_worse``: noise alone never counts, only a
difference beyond the margin at confidence ``z``.

- **Paired by task** when the robots declare task ids and at least ``min_episodes`` of
  the live window's episodes have a task the reference window also ran: each such live
  episode is compared with the reference's mean on the same task, on success, final
  distance, intervention rate and backup rate. Two windows of different tasks (a run of
  hard targets after a run of easy ones) are then not mistaken for a degradation.
- **Unpaired** otherwise (no task ids, or tasks that never repeat): the windows' means
  on return, success, intervention rate and backup rate.

The reference window was recorded while the last-known-good version was live, so a
drift of the robot or its tasks since then that hurts every version alike reads as a
degradation of live. When live is clearly worse on any metric for ``sustain_episodes``
consecutive comparisons, the monitor therefore asks before it acts: with a router and
``check.pairs`` > 0, and live's episodes declaring tasks and final distances, it serves
the last-known-good version beside live on the same tasks (a *check*, the router's
paired share at the base limits) and judges the pairs with the windows' own test (the
per-pair differences of success, final distance, intervention and backup rate, at the
same margins and ``z``):

- live shown worse than the last-known-good now → roll back, with the check's numbers;
  while it is not shown worse but its estimate is past a margin, the check pairs on, up
  to ``check.max_pairs``, and judges again after every pair;
- not shown worse (and no estimate past a margin, or ``max_pairs`` reached) → live
  stays; the reference becomes live's own episodes under today's conditions: its arm of
  the check, then its next episodes until the reference holds a window (a baseline the
  check found no worse than the last-known-good), so a later drop of live against it
  raises a new check;
- no verdict after ``check.max_episodes`` episodes (tasks that do not repeat), or no
  check possible (no router, no task ids, ``pairs`` 0) → roll back on the windows' numbers;
- the last-known-good unloaded meanwhile → the check is dropped, its share ended.

A check waits while a canary holds the router's share (live's episodes, its control arm's
among them, keep counting towards ``check.max_episodes``), and a canary that starts during a check waits
for it. The rollback goes through the registry, records a :class:`RollbackEvent` with
the numbers and calls its listeners; the registry's own listeners then tell the learner
which weights are live. Invariant: one rollback per degradation — the counter, a running
check and the re-based reference reset on every change of the live version.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tether.versions.errors import VersionError
from tether.versions.records import EpisodeOutcome, Figure, LiveChange, Measurement
from tether.versions.registry import ModelRegistry
from tether.versions.routing import PairedShare, TrafficRouter
from tether.versions.stages.canary import TaskPairs
from tether.versions.statistics import clearly_worse, compare_episodes, confidence_z

_log = logging.getLogger(__name__)


class RollbackCheckConfig(BaseModel):
    """The check before a rollback: the last-known-good version beside live, same tasks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pairs: int = Field(
        default=8,
        ge=0,
        description="Task pairs (one live and one last-known-good episode of one task, served "
        "side by side at the base limits) that decide a rollback the windows call for; 0 "
        "rolls back on the windows alone (pairs)",
    )
    fraction: float = Field(
        default=0.5,
        gt=0.0,
        le=0.5,
        description="Share of episodes the last-known-good version acts in during a check; "
        "as many again are live's, on the same tasks (ratio)",
    )
    max_pairs: int = Field(
        default=24,
        ge=2,
        description="Task pairs a check may go on to while live's estimate is past a margin "
        "but not shown worse; at this count live stays (pairs)",
    )
    max_episodes: int = Field(
        default=100,
        ge=1,
        description="Episodes a check (or a check waiting for a canary) may take before the "
        "windows' verdict stands without it (episodes)",
    )

    @field_validator("pairs")
    @classmethod
    def _judgeable(cls, pairs: int) -> int:
        if pairs == 1:
            raise ValueError("a check needs at least 2 task pairs to judge, or 0 for none")
        return pairs

    @model_validator(mode="after")
    def _ordered(self) -> RollbackCheckConfig:
        if self.max_pairs < self.pairs:
            raise ValueError(
                f"check.max_pairs ({self.max_pairs}) must be at least check.pairs ({self.pairs})"
            )
        return self


class RollbackConfig(BaseModel):
    """When a degradation of the live version is real and sustained enough to roll back."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_episodes: int = Field(
        default=30, ge=2, description="Episodes per version in the sliding window (episodes)"
    )
    min_episodes: int = Field(
        default=10, ge=2, description="Episodes both windows need before comparing (episodes)"
    )
    sustain_episodes: int = Field(
        default=5,
        ge=1,
        description="Consecutive live episodes that must all show degradation (episodes)",
    )
    z: float = confidence_z()
    return_margin: float = Field(
        default=10.0, ge=0.0, description="Tolerated drop of mean return (return)"
    )
    success_margin: float = Field(
        default=0.15, ge=0.0, le=1.0, description="Tolerated drop of success rate (ratio)"
    )
    intervention_margin: float = Field(
        default=0.05, ge=0.0, le=1.0, description="Tolerated rise of interventions per step (ratio)"
    )
    backup_margin: float = Field(
        default=0.02,
        ge=0.0,
        le=1.0,
        description="Tolerated rise of backup actions per step (ratio)",
    )
    distance_margin_m: float = Field(
        default=0.05,
        ge=0.0,
        description="Tolerated rise of the final distance to the target, when compared on "
        "the same tasks (m)",
    )
    check: RollbackCheckConfig = Field(
        default_factory=RollbackCheckConfig,
        description="The last-known-good served beside live before a rollback",
    )


@dataclass(frozen=True)
class RollbackEvent:
    """An automatic rollback and the numbers that caused it."""

    from_version: int
    to_version: int
    measurements: tuple[Measurement, ...]
    live_episodes: int
    reference_episodes: int
    at_s: float
    check_pairs: int = 0  # the check's task pairs when one decided it; 0: the windows did

    def describe(self) -> str:
        failed = "; ".join(m.describe() for m in self.measurements if not m.passed)
        over = (
            f"served side by side on {self.check_pairs} task pairs"
            if self.check_pairs
            else f"over {self.live_episodes} vs {self.reference_episodes} episodes"
        )
        return f"rolled back version {self.from_version} to {self.to_version}: {over}, {failed}"


@dataclass(frozen=True)
class CheckOutcome:
    """A check that ended with a verdict: live against the last-known-good, side by side."""

    live: int
    last_known_good: int
    rolled_back: bool
    pairs: int
    measurements: tuple[Measurement, ...]
    figures: tuple[Figure, ...]
    at_s: float

    def details(self) -> dict[str, Any]:
        """The numbers a run's event log records (``tether run``, a fleet's edges)."""
        return {
            "stage": "rollback_check",
            "last_known_good": self.last_known_good,
            "rolled_back": self.rolled_back,
            "pairs": self.pairs,
            **{m.name: m.value for m in self.measurements},
        }

    def describe(self) -> str:
        verdict = "rolled back" if self.rolled_back else "live stays"
        numbers = "; ".join(m.describe() for m in self.measurements)
        reported = ", ".join(f.describe() for f in self.figures)
        return (
            f"rollback check of version {self.live} against {self.last_known_good} on "
            f"{self.pairs} task pairs: {verdict} ({numbers}; reported: {reported})"
        )


@dataclass
class _Check:
    """A check in progress (``share`` None: waiting for a canary to free the router)."""

    live: int
    last_known_good: int
    windows: tuple[Measurement, ...]  # the windows' verdict that asked for it
    share: PairedShare | None = None
    matched: TaskPairs | None = None  # live's and the last-known-good's, set with the share
    episodes: int = 0  # live's own and its share's episodes since it was asked for


class RollbackMonitor:
    """Watches live vs last-known-good episodes and rolls back on sustained degradation."""

    def __init__(
        self,
        registry: ModelRegistry[Any],
        config: RollbackConfig,
        *,
        router: TrafficRouter | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._registry = registry
        self._router = router
        self.config = config
        self._clock = wall_clock
        self._lock = threading.Lock()
        self._windows: dict[int, deque[EpisodeOutcome]] = {}
        self._strikes = 0
        self._check: _Check | None = None
        # (live, last-known-good, live's episodes since a check kept it): the reference then.
        self._rebased: tuple[int, int, list[EpisodeOutcome]] | None = None
        self._listeners: list[Callable[[RollbackEvent], None]] = []
        self._check_listeners: list[Callable[[CheckOutcome], None]] = []
        self.events: list[RollbackEvent] = []
        self.checks: list[CheckOutcome] = []
        registry.add_listener(self._on_live_change)

    def add_listener(self, listener: Callable[[RollbackEvent], None]) -> None:
        self._listeners.append(listener)

    def add_check_listener(self, listener: Callable[[CheckOutcome], None]) -> None:
        """Called when a check ends with a verdict (before the rollback it may cause)."""
        self._check_listeners.append(listener)

    def add(self, outcome: EpisodeOutcome) -> RollbackEvent | None:
        """Count one finished episode; returns the rollback it triggered, if any.

        Live's episodes at the base limits fill the windows, a canary's control arm's
        among them; a running check's episodes count only for it, and a canary's own
        (the candidate's) only for the gate.
        """
        live = self._registry.live()
        is_live = live is not None and outcome.version == live.id
        if outcome.tightened or (outcome.experiment and not (is_live and self._unchecked(outcome))):
            return self._check_episode(outcome)
        with self._lock:
            window = self._windows.setdefault(
                outcome.version, deque(maxlen=self.config.window_episodes)
            )
            window.append(outcome)
            rebased = self._rebased
            if (
                rebased is not None
                and rebased[0] == outcome.version
                and len(rebased[2]) < self.config.window_episodes
            ):
                rebased[2].append(outcome)
        if live is None or not is_live:
            return None
        with self._lock:
            check = self._check
            if check is not None:
                check.episodes += 1
        if check is not None:
            return self._wait(check)
        lkg = self._registry.last_known_good()
        if lkg is None:
            return None
        measurements = self.compare(live.id, lkg.id)
        if measurements is None:
            return None
        with self._lock:
            degraded = not all(m.passed for m in measurements)
            self._strikes = self._strikes + 1 if degraded else 0
            if self._strikes < self.config.sustain_episodes:
                return None
            self._strikes = 0
        if self._checkable(live.id):
            check = _Check(live.id, lkg.id, measurements)
            with self._lock:
                self._check = check
            return self._wait(check)
        return self._roll_back(live.id, lkg.id, measurements)

    def _unchecked(self, outcome: EpisodeOutcome) -> bool:
        """Whether a paired share's episode belongs to no running check (live's, then:
        a canary's control arm, on its usual tasks at the base limits)."""
        with self._lock:
            share = None if self._check is None else self._check.share
        return share is None or outcome.trial != share.trial

    def compare(self, live: int, reference: int) -> tuple[Measurement, ...] | None:
        """Live vs reference, paired by task where it can be (module docstring), or None
        while a window is too short. After a check kept live, the reference is live's own
        episodes since (module docstring)."""
        with self._lock:
            cur = list(self._windows.get(live, ()))
            rebased = self._rebased
            if rebased is not None and rebased[:2] == (live, reference):
                ref = list(rebased[2])
            else:
                ref = list(self._windows.get(reference, ()))
        c = self.config
        if min(len(cur), len(ref)) < c.min_episodes:
            return None
        paired = _paired_by_task(cur, ref)
        if paired is not None and len(paired[0]) >= c.min_episodes:
            return self._judge_differences(paired)
        margins = (
            ("return", c.return_margin),
            ("success", c.success_margin),
            ("intervention_rate", c.intervention_margin),
            ("backup_rate", c.backup_margin),
        )
        return compare_episodes(clearly_worse, cur, ref, margins, z=c.z)

    def _judge_differences(
        self, diffs: _Columns, *, z: float | None = None
    ) -> tuple[Measurement, ...]:
        """Live minus the reference per episode or pair: success, final distance,
        intervention rate, backup rate, each clearly worse or not (at ``z``, the
        config's by default; 0 judges the point estimates)."""
        c = self.config
        z = c.z if z is None else z
        return tuple(
            clearly_worse(name, column, [0.0], margin=margin, z=z, higher_is_better=higher)
            for (name, margin, higher), column in zip(
                (
                    ("success", c.success_margin, True),
                    ("final_distance_m", c.distance_margin_m, False),
                    ("intervention_rate", c.intervention_margin, False),
                    ("backup_rate", c.backup_margin, False),
                ),
                diffs,
                strict=True,
            )
        )

    def _checkable(self, live: int) -> bool:
        """Whether a check could pair live's episodes: a router, pairs configured, and
        live's recent episodes all declaring a task and a final distance."""
        if self._router is None or self.config.check.pairs == 0:
            return False
        with self._lock:
            recent = list(self._windows.get(live, ()))[-self.config.min_episodes :]
        return bool(recent) and all(o.task_id and o.final_distance_m is not None for o in recent)

    def _wait(self, check: _Check) -> RollbackEvent | None:
        """Start ``check``'s share once the router is free; past ``max_episodes`` episodes
        without a verdict the windows' verdict stands. A check whose last-known-good is
        no longer that (unloaded meanwhile) is dropped: the next alarm compares live with
        the one there is then."""
        if not self._current(check):
            return None
        if check.episodes >= self.config.check.max_episodes:
            _log.warning(
                "rollback check of version %d against %d: no verdict after %d episodes; "
                "rolling back on the windows",
                check.live,
                check.last_known_good,
                check.episodes,
            )
            return self._roll_back(check.live, check.last_known_good, check.windows)
        if check.share is not None:
            return None
        assert self._router is not None  # _checkable
        try:
            share = self._router.start_check(check.last_known_good, self.config.check.fraction)
        except VersionError as exc:  # unloaded since _current() read it
            _log.warning("rollback check not started: %s", exc)
            self._drop(check)
            return None
        if share is None:
            return None  # a canary holds the router's share: ask again next episode
        # Paired by task as the canary's are, live in the candidate's place.
        matched = TaskPairs(candidate=check.live, baseline=check.last_known_good, trial=share.trial)
        with self._lock:
            stale = self._check is not check  # live changed since the alarm
            if not stale:
                check.share, check.matched = share, matched
        if stale:
            self._router.stop_check(share.trial)
            return None
        _log.info(
            "rollback check: version %d served beside live %d on the same tasks (%s)",
            check.last_known_good,
            check.live,
            "; ".join(m.describe() for m in check.windows if not m.passed),
        )
        return None

    def _check_episode(self, outcome: EpisodeOutcome) -> RollbackEvent | None:
        with self._lock:
            check = self._check
            if check is None or check.share is None or outcome.trial != check.share.trial:
                return None
            check.episodes += 1
        assert check.matched is not None  # set with the share
        if not self._current(check):
            return None
        check.matched.add(outcome)
        pairs = check.matched.pairs
        if len(pairs) < self.config.check.pairs:
            return self._wait(check)  # tasks that do not repeat never close a pair
        diffs = _differences((a, (b,)) for a, b in pairs)  # TaskPairs: distances present
        measurements = self._judge_differences(diffs)
        degraded = not all(m.passed for m in measurements)
        if (  # not shown worse, but the estimate itself is past a margin: pair on
            not degraded
            and len(pairs) < self.config.check.max_pairs
            and not all(m.passed for m in self._judge_differences(diffs, z=0.0))
        ):
            return self._wait(check)
        with self._lock:
            if self._check is not check:
                return None
            self._check = None
            if not degraded:
                self._strikes = 0
                self._rebased = (check.live, check.last_known_good, [a for a, _ in pairs])
        n = len(pairs)
        figures = (
            Figure("live_success", sum(a.success for a, _ in pairs) / n),
            Figure("last_known_good_success", sum(b.success for _, b in pairs) / n),
        )
        result = CheckOutcome(
            check.live,
            check.last_known_good,
            degraded,
            n,
            measurements,
            figures,
            self._clock(),
        )
        self.checks.append(result)
        _log.info("%s", result.describe())
        for listener in list(self._check_listeners):
            listener(result)
        if not degraded:
            assert self._router is not None
            self._router.stop_check(check.share.trial)
            return None
        return self._roll_back(check.live, check.last_known_good, measurements, check_pairs=n)

    def _current(self, check: _Check) -> bool:
        """Whether ``check``'s last-known-good is still that; else the check is dropped."""
        lkg = self._registry.last_known_good()
        if lkg is not None and lkg.id == check.last_known_good:
            return True
        _log.warning(
            "rollback check of version %d dropped: its last-known-good %d is no longer that",
            check.live,
            check.last_known_good,
        )
        self._drop(check)
        return False

    def _drop(self, check: _Check) -> None:
        with self._lock:
            if self._check is check:
                self._check = None
        if check.share is not None and self._router is not None:
            self._router.stop_check(check.share.trial)

    def _roll_back(
        self,
        live: int,
        lkg: int,
        measurements: tuple[Measurement, ...],
        *,
        check_pairs: int = 0,
    ) -> RollbackEvent:
        with self._lock:
            n_live = len(self._windows.get(live, ()))
            n_ref = len(self._windows.get(lkg, ()))
        event = RollbackEvent(
            live, lkg, measurements, n_live, n_ref, self._clock(), check_pairs=check_pairs
        )
        self._registry.rollback(event.describe())
        self.events.append(event)
        for listener in list(self._listeners):
            listener(event)
        return event

    def _on_live_change(self, change: LiveChange) -> None:
        # The router ends a running check on the same change.
        with self._lock:
            self._strikes = 0
            self._check = None
            self._rebased = None


# Per episode or pair: success, final distance, intervention rate, backup rate.
_Columns = tuple[list[float], list[float], list[float], list[float]]


def _differences(rows: Iterable[tuple[EpisodeOutcome, Sequence[EpisodeOutcome]]]) -> _Columns:
    """Per (episode, its references) row: the episode's success, final distance,
    intervention rate and backup rate minus the references' means (every final distance
    present: the callers check)."""
    out: _Columns = ([], [], [], [])
    for o, same in rows:
        values = (
            (float(o.success), [float(r.success) for r in same]),
            (o.final_distance_m or 0.0, [r.final_distance_m or 0.0 for r in same]),
            (o.intervention_rate, [r.intervention_rate for r in same]),
            (o.backup_rate, [r.backup_rate for r in same]),
        )
        for column, (value, refs) in zip(out, values, strict=True):
            column.append(value - sum(refs) / len(refs))
    return out


def _paired_by_task(
    current: list[EpisodeOutcome], reference: list[EpisodeOutcome]
) -> _Columns | None:
    """Per current episode with a task the reference also ran: its success, final
    distance, intervention rate and backup rate minus the reference's mean on that task.
    None when an episode lacks a final distance (the robot does not report one)."""
    by_task: dict[str, list[EpisodeOutcome]] = {}
    for o in reference:
        if o.task_id:
            by_task.setdefault(o.task_id, []).append(o)
    rows = []
    for o in current:
        same = by_task.get(o.task_id) if o.task_id else None
        if not same:
            continue
        if o.final_distance_m is None or any(r.final_distance_m is None for r in same):
            return None
        rows.append((o, same))
    return _differences(rows)
