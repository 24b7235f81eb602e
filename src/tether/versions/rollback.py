"""The rollback monitor: a live version that degrades is replaced by the last-known-good one.

Each version's most recent episodes are kept in a sliding window. After every episode of
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

When the live version is clearly worse on any metric for ``sustain_episodes``
consecutive checks the monitor rolls back through the registry, records a
:class:`RollbackEvent` with the numbers and calls its listeners; the registry's own
listeners then tell the learner which weights are live. Invariant: one rollback per
degradation — the counter resets on every change of the live version.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tether.versions.records import EpisodeOutcome, LiveChange, Measurement
from tether.versions.registry import ModelRegistry
from tether.versions.statistics import clearly_worse, compare_episodes, confidence_z


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


@dataclass(frozen=True)
class RollbackEvent:
    """An automatic rollback and the numbers that caused it."""

    from_version: int
    to_version: int
    measurements: tuple[Measurement, ...]
    live_episodes: int
    reference_episodes: int
    at_s: float

    def describe(self) -> str:
        failed = "; ".join(m.describe() for m in self.measurements if not m.passed)
        return (
            f"rolled back version {self.from_version} to {self.to_version}: over "
            f"{self.live_episodes} vs {self.reference_episodes} episodes, {failed}"
        )


class RollbackMonitor:
    """Watches live vs last-known-good episodes and rolls back on sustained degradation."""

    def __init__(
        self,
        registry: ModelRegistry[Any],
        config: RollbackConfig,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._registry = registry
        self.config = config
        self._clock = wall_clock
        self._lock = threading.Lock()
        self._windows: dict[int, deque[EpisodeOutcome]] = {}
        self._strikes = 0
        self._listeners: list[Callable[[RollbackEvent], None]] = []
        self.events: list[RollbackEvent] = []
        registry.add_listener(self._on_live_change)

    def add_listener(self, listener: Callable[[RollbackEvent], None]) -> None:
        self._listeners.append(listener)

    def add(self, outcome: EpisodeOutcome) -> RollbackEvent | None:
        """Count one finished episode; returns the rollback it triggered, if any."""
        with self._lock:
            window = self._windows.setdefault(
                outcome.version, deque(maxlen=self.config.window_episodes)
            )
            window.append(outcome)
        live, lkg = self._registry.live(), self._registry.last_known_good()
        if live is None or lkg is None or outcome.version != live.id:
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
            n_live, n_ref = len(self._windows[live.id]), len(self._windows[lkg.id])
        event = RollbackEvent(live.id, lkg.id, measurements, n_live, n_ref, self._clock())
        self._registry.rollback(event.describe())
        self.events.append(event)
        for listener in list(self._listeners):
            listener(event)
        return event

    def compare(self, live: int, reference: int) -> tuple[Measurement, ...] | None:
        """Live vs reference, paired by task where it can be (module docstring), or None
        while a window is too short."""
        with self._lock:
            cur = list(self._windows.get(live, ()))
            ref = list(self._windows.get(reference, ()))
        c = self.config
        if min(len(cur), len(ref)) < c.min_episodes:
            return None
        paired = _paired_by_task(cur, ref)
        if paired is not None and len(paired[0]) >= c.min_episodes:
            return tuple(
                clearly_worse(
                    name,
                    diffs,
                    [0.0],
                    margin=margin,
                    z=c.z,
                    higher_is_better=higher_is_better,
                )
                for (name, margin, higher_is_better), diffs in zip(
                    (
                        ("success", c.success_margin, True),
                        ("final_distance_m", c.distance_margin_m, False),
                        ("intervention_rate", c.intervention_margin, False),
                        ("backup_rate", c.backup_margin, False),
                    ),
                    paired,
                    strict=True,
                )
            )
        margins = (
            ("return", c.return_margin),
            ("success", c.success_margin),
            ("intervention_rate", c.intervention_margin),
            ("backup_rate", c.backup_margin),
        )
        return compare_episodes(clearly_worse, cur, ref, margins, z=c.z)

    def _on_live_change(self, change: LiveChange) -> None:
        with self._lock:
            self._strikes = 0


def _paired_by_task(
    current: list[EpisodeOutcome], reference: list[EpisodeOutcome]
) -> tuple[list[float], list[float], list[float], list[float]] | None:
    """Per current episode with a task the reference also ran: its success, final
    distance, intervention rate and backup rate minus the reference's mean on that task.
    None when an episode lacks a final distance (the robot does not report one)."""
    by_task: dict[str, list[EpisodeOutcome]] = {}
    for o in reference:
        if o.task_id:
            by_task.setdefault(o.task_id, []).append(o)
    out: tuple[list[float], list[float], list[float], list[float]] = ([], [], [], [])
    for o in current:
        same = by_task.get(o.task_id) if o.task_id else None
        if not same:
            continue
        if o.final_distance_m is None or any(r.final_distance_m is None for r in same):
            return None
        values = (
            (float(o.success), [float(r.success) for r in same]),
            (o.final_distance_m, [r.final_distance_m or 0.0 for r in same]),
            (o.intervention_rate, [r.intervention_rate for r in same]),
            (o.backup_rate, [r.backup_rate for r in same]),
        )
        for column, (value, refs) in zip(out, values, strict=True):
            column.append(value - sum(refs) / len(refs))
    return out
