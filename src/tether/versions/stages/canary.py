"""The canary stage: the candidate acts in a fraction of episodes, under tightened limits.

The router (``tether.versions.routing``) gives the canary its share of episodes and as
many again to its *control*, the live version; the server serves both with
``SafetyLimits.tightened(config.safety_tightening)``. This module collects the finished
episodes of the canary and of its control over the same period and decides with a
non-inferiority test (``tether.versions.statistics``): return and success may not be
shown worse than the control's by more than their margins, and the intervention rate
may not be shown higher by more than its margin, at the one-sided confidence ``z``.

Only the control counts as "live": episodes at full limits move faster and are
corrected less than episodes under tightened ones, so judged against them even a copy
of the live policy would be shown worse (``tests/versions/stages/test_canary.py`` holds a copy
to that). Invariant: no verdict before ``episodes`` canary episodes and
``min_live_episodes`` control ones.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tether.versions.records import EpisodeOutcome, GateStage, StageVerdict
from tether.versions.statistics import compare_episodes, confidence_z, not_worse


class CanaryConfig(BaseModel):
    """Share, length and pass criteria of the canary stage."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fraction: float = Field(
        default=0.2,
        gt=0.0,
        le=0.5,
        description="Share of episodes the canary acts in; as many again are its control, the "
        "live version under the same tightened limits (ratio)",
    )
    episodes: int = Field(
        default=30, ge=1, description="Canary episodes before the verdict (episodes)"
    )
    min_live_episodes: int = Field(
        default=30,
        ge=1,
        description="Control episodes (live, tightened like the canary) in the same period "
        "needed to compare (episodes)",
    )
    safety_tightening: float = Field(
        default=0.8,
        gt=0.0,
        le=1.0,
        description="Factor passed to SafetyLimits.tightened() for the canary's and its "
        "control's steps at NORMAL; below NORMAL the RESTRICTED limits apply (ratio)",
    )
    z: float = confidence_z()
    return_margin: float = Field(
        default=5.0, ge=0.0, description="Allowed shortfall of mean episode return vs live (return)"
    )
    success_margin: float = Field(
        default=0.2, ge=0.0, le=1.0, description="Allowed shortfall of success rate vs live (ratio)"
    )
    intervention_margin: float = Field(
        default=0.02, ge=0.0, le=1.0, description="Allowed excess of interventions per step (ratio)"
    )


class CanaryEvaluator:
    """Collects canary and live episodes of one period and judges them."""

    def __init__(self, *, candidate: int, baseline: int, config: CanaryConfig) -> None:
        self.candidate = candidate
        self.baseline = baseline
        self.config = config
        self._cand: list[EpisodeOutcome] = []
        self._live: list[EpisodeOutcome] = []

    def add(self, outcome: EpisodeOutcome) -> StageVerdict | None:
        """Count one finished episode; returns the verdict when enough are in."""
        if self.ready:
            return None
        if outcome.version == self.candidate:
            self._cand.append(outcome)
        elif outcome.version == self.baseline and outcome.tightened:
            self._live.append(outcome)  # the control: the same limits as the canary's
        return self.verdict() if self.ready else None

    @property
    def ready(self) -> bool:
        return (
            len(self._cand) >= self.config.episodes
            and len(self._live) >= self.config.min_live_episodes
        )

    def verdict(self) -> StageVerdict:
        if not self._cand or not self._live:
            raise ValueError(
                f"canary of version {self.candidate} has {len(self._cand)} canary and "
                f"{len(self._live)} live episodes; it needs at least one of each to judge"
            )
        c = self.config
        margins = (
            ("return", c.return_margin),
            ("success", c.success_margin),
            ("intervention_rate", c.intervention_margin),
        )
        return StageVerdict(
            stage=GateStage.CANARY,
            candidate=self.candidate,
            baseline=self.baseline,
            measurements=compare_episodes(not_worse, self._cand, self._live, margins, z=c.z),
            samples=len(self._cand) + len(self._live),
        )
