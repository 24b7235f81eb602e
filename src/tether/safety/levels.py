"""Vocabulary of the degradation machine: levels, event kinds, transition records.

Kept apart from the machine so serving, learning and the metrics can name levels and
events without importing the machine's logic.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum


class DegradationLevel(IntEnum):
    """Higher is more degraded; moving to a higher level is immediate, back down is slow."""

    NORMAL = 0  # learning and publishing
    RESTRICTED = 1  # tighter limits; the learner trains but may not publish
    PAUSED = 2  # learning stopped; the live policy keeps serving
    TAKEOVER = 3  # the backup (or a human) controls; only an operator resumes


class EventKind(StrEnum):
    """What the machine counts in each robot's sliding window."""

    INTERVENTION = "intervention"  # the supervisor corrected a policy action
    BACKUP_ACTION = "backup_action"  # the supervisor replaced an action by the backup
    NAN_OUTPUT = "nan_output"  # the policy produced NaN or Inf
    WATCHDOG_MISS = "watchdog_miss"  # a client's watchdog fired (reply missed its deadline)
    ROBOT_FAULT = "robot_fault"  # the robot reported a fault
    GATE_REJECTION = "gate_rejection"  # the evaluation gate refused or rolled back a version


@dataclass(frozen=True)
class DegradationTransition:
    """One change of level, with why, when (the machine's clock, s) and under which version."""

    from_level: DegradationLevel
    to_level: DegradationLevel
    reason: str
    time_s: float
    policy_version: int | None
    trigger: EventKind | None = None  # the event kind whose count crossed a threshold
    operator: str | None = None  # who resumed, for operator transitions
    robot_id: str | None = None  # whose level moved; None: the learning-wide level

    @property
    def is_degradation(self) -> bool:
        return self.to_level > self.from_level


@dataclass(frozen=True)
class WindowCounts:
    """Events in the current window: per kind, and interventions per check bit."""

    window_s: float
    by_kind: tuple[tuple[EventKind, int], ...]
    interventions_by_check: tuple[tuple[str, int], ...]
    steps: int = 0  # the robot's control steps in the window: the rates' denominator

    def count(self, kind: EventKind) -> int:
        return dict(self.by_kind).get(kind, 0)
