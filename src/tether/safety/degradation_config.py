"""Thresholds and timing of the degradation machine, as one validated config model.

Invariant: for every event kind, a more degraded level never has a lower enabled
threshold than a less degraded one, so counts move the level monotonically.
"""

from __future__ import annotations

import itertools

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tether.safety.levels import DegradationLevel, EventKind
from tether.safety.verdict import SafetyCheck


class LevelThresholds(BaseModel):
    """Counts within the window at or above which a level is entered; 0 disables a count."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    intervention: int = Field(default=0, ge=0, description="Corrected policy actions (count)")
    backup_action: int = Field(
        default=0, ge=0, description="Actions replaced by the backup (count)"
    )
    nan_output: int = Field(default=0, ge=0, description="Policy outputs with NaN or Inf (count)")
    watchdog_miss: int = Field(
        default=0, ge=0, description="Client watchdog misses reported (count)"
    )
    robot_fault: int = Field(default=0, ge=0, description="Faults reported by the robot (count)")
    gate_rejection: int = Field(default=0, ge=0, description="Gate refusals or rollbacks (count)")
    per_check: dict[str, int] = Field(
        default_factory=dict,
        description="Interventions by one check, keyed by SafetyCheck name, e.g. OBSTACLE (count)",
    )

    @field_validator("per_check")
    @classmethod
    def _known_checks(cls, value: dict[str, int]) -> dict[str, int]:
        names = {c.name for c in SafetyCheck if c.name and c is not SafetyCheck.NONE}
        for key, count in value.items():
            if key not in names:
                raise ValueError(f"per_check key must be one of {sorted(names)}, got {key!r}")
            if count < 0:
                raise ValueError(f"per_check[{key}] must be >= 0 (0 disables), got {count}")
        return value

    def threshold(self, kind: EventKind) -> int:
        value: int = getattr(self, kind.value)
        return value


class DegradationConfig(BaseModel):
    """When the machine degrades and how it recovers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_s: float = Field(
        default=10.0, gt=0.0, description="Length of the sliding count window (s)"
    )
    quiet_period_s: float = Field(
        default=30.0, gt=0.0, description="Time without a trigger before moving up one level (s)"
    )
    restricted_tighten_factor: float = Field(
        default=0.5,
        gt=0.0,
        le=1.0,
        description="Factor SafetyLimits.tightened gets below NORMAL (1)",
    )
    session_warmup_steps: int = Field(
        default=50,
        ge=0,
        description="A robot session's first control steps whose client watchdog misses do "
        "not count: start-up work (first calls, the learner's start), not the policy (steps)",
    )
    history_size: int = Field(
        default=256, ge=1, description="Transitions kept in the history (count)"
    )
    resume_level: DegradationLevel = Field(
        default=DegradationLevel.PAUSED,
        description="Level an operator's resume leaves TAKEOVER for (level)",
    )
    # Defaults are counts in one window shared by every robot of a server, sized for
    # `tether run`'s two robots at 50 Hz: 1,000 control steps per 10 s window (one robot:
    # 500; more robots reach each count sooner, the safe direction). Each one is a rate
    # that is clearly abnormal for a policy that is still learning, measured against the
    # shipped pretrained policy on the built-in arm (docs/safety.md, "Default thresholds").
    restricted: LevelThresholds = Field(
        default_factory=lambda: LevelThresholds(
            # 99 %: the sampled shipped policy is corrected on 91-95 % of its steps (its own
            # excess, and exploration noise), so 95 % made its normal rate a trigger and
            # tether run flapped NORMAL/RESTRICTED every few seconds.
            intervention=990,
            backup_action=25,
            nan_output=1,
            watchdog_miss=10,
            robot_fault=1,
            gate_rejection=1,
            per_check={"OBSTACLE": 600, "WORKSPACE": 600},
        ),
        description="Counts that enter RESTRICTED (count)",
    )
    paused: LevelThresholds = Field(
        default_factory=lambda: LevelThresholds(
            backup_action=100,
            nan_output=5,
            watchdog_miss=50,
            robot_fault=3,
            gate_rejection=3,
            per_check={"OBSTACLE": 900},
        ),
        description="Counts that enter PAUSED (count)",
    )
    takeover: LevelThresholds = Field(
        default_factory=lambda: LevelThresholds(
            backup_action=250, nan_output=20, watchdog_miss=150, robot_fault=5
        ),
        description="Counts that enter TAKEOVER (count)",
    )

    @model_validator(mode="after")
    def _monotonic(self) -> DegradationConfig:
        if self.resume_level is DegradationLevel.TAKEOVER:
            raise ValueError("resume_level must be below TAKEOVER, got TAKEOVER")
        for kind in EventKind:
            enabled = [
                (name, t.threshold(kind)) for name, t in self.by_level() if t.threshold(kind) > 0
            ]
            for (lower, a), (higher, b) in itertools.pairwise(enabled):
                if b < a:
                    raise ValueError(
                        f"{higher.name}.{kind.value} ({b}) must be >= {lower.name}.{kind.value} "
                        f"({a}): a worse level cannot trigger on fewer events"
                    )
        return self

    def by_level(self) -> tuple[tuple[DegradationLevel, LevelThresholds], ...]:
        return (
            (DegradationLevel.RESTRICTED, self.restricted),
            (DegradationLevel.PAUSED, self.paused),
            (DegradationLevel.TAKEOVER, self.takeover),
        )
