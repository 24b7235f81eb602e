"""The rollback monitor: a live version that degrades is replaced by the last-known-good one.

Each version's most recent episodes are kept in a sliding window. After every episode of
the live version the monitor compares its window with the last-known-good version's
window (recorded while *that* version was live) on return, success, intervention rate
and backup rate, each with ``tether.versions.statistics.clearly_worse``: noise alone never
counts, only a difference beyond the margin at confidence ``z``. When the live version
is clearly worse on any metric for ``sustain_episodes`` consecutive checks the monitor
rolls back through the registry, records a :class:`RollbackEvent` with the numbers and
calls its listeners; the registry's own listeners then tell the learner which weights
are live. Invariant: one rollback per degradation — the counter resets on every change
of the live version.
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
        """Live vs reference on the four metrics, or None while a window is too short."""
        with self._lock:
            cur = list(self._windows.get(live, ()))
            ref = list(self._windows.get(reference, ()))
        if min(len(cur), len(ref)) < self.config.min_episodes:
            return None
        c = self.config
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
