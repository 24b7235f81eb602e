"""The canary stage: the candidate and its control run the same tasks, and are compared pair by pair.

The router (``tether.versions.routing``) sends each task a robot declares to both arms:
one episode to the canary, one to its *control* (the live version under the same
limits, ``SafetyLimits.tightened(config.safety_tightening)``: the base ones at 1.0), in an order
drawn per pair, so both arms see the same start poses and targets at nearly the same
time (common random numbers). This module matches the finished episodes into pairs by
task id and judges the per-pair differences (``tether.versions.statistics``):

- **success** (``canary - control`` in {-1, 0, 1}) and **final distance** (m) — the task
  metrics; **interventions per step** — the safety cost;
- each is a harm test: the candidate fails when the difference is *shown* worse than
  its margin (the confidence bound on the good side is beyond it); the bound's
  multiplier is Student's t at the quantile that keeps the three tests together at
  ``false_rejection_rate`` for a candidate that behaves exactly like live;
- the return is reported (a :class:`Figure`), never judged: one episode's return is
  dominated by a thresholded reward term and varies more across tasks than any
  adaptation moves it.

Why a harm test and not "shown not worse": proving non-inferiority at a useful margin
needs hundreds of pairs; with the few dozen a short run gives, an unchanged copy of
live would fail most of the time. A harm test fails such a copy at the stated rate and
rejects a clearly harmful candidate (e.g. negated actions: every pair far worse in final
distance) within a few pairs; a subtle regression that slips through is the rollback
monitor's to catch.

Invariants: only paired episodes count — an episode without a task id or a final
distance, or whose partner never finished, is not used; no verdict before ``pairs``
pairs; the control is live *under the canary's limits* (judged against live at full
limits even a copy of live looks worse).
"""

from __future__ import annotations

from collections import deque

from pydantic import BaseModel, ConfigDict, Field

from tether.versions.records import EpisodeOutcome, Figure, GateStage, Measurement, StageVerdict
from tether.versions.statistics import family_quantile, paired_difference, student_t_quantile

# success, final distance, intervention rate: the three criteria the family-wise rate covers
_CRITERIA = 3


class CanaryConfig(BaseModel):
    """Share, length and pass criteria of the canary stage."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fraction: float = Field(
        default=0.2,
        gt=0.0,
        le=0.5,
        description="Share of episodes the canary acts in; as many again are its control, the "
        "live version under the same limits, on the same tasks (ratio)",
    )
    pairs: int = Field(
        default=30,
        ge=2,
        description="Task pairs (one canary and one control episode of the same task) before "
        "the verdict (pairs)",
    )
    # 0.9: the shipped position bundle's action frame moves the command's change by up to
    # 0.85 of the acceleration cap, so at 0.8 the supervisor corrected the canary's and its
    # control's steps alike (44 % of the learning robot's steps in tether run).
    safety_tightening: float = Field(
        default=0.9,
        gt=0.0,
        le=1.0,
        description="Factor passed to SafetyLimits.tightened() for the canary's and its "
        "control's steps at NORMAL; below NORMAL the RESTRICTED limits apply (ratio)",
    )
    false_rejection_rate: float = Field(
        default=0.05,
        gt=0.0,
        lt=1.0,
        description="How often a candidate that behaves exactly like live may fail the "
        "stage by chance, all criteria together (ratio)",
    )
    success_margin: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Success-rate shortfall vs the control tolerated even when shown (ratio)",
    )
    distance_margin_m: float = Field(
        default=0.0,
        ge=0.0,
        description="Excess of final distance to the target vs the control tolerated even when "
        "shown (m)",
    )
    intervention_margin: float = Field(
        default=0.02,
        ge=0.0,
        le=1.0,
        description="Excess of interventions per step vs the control tolerated even when "
        "shown (ratio)",
    )

    def multiplier(self, pairs: int) -> float:
        """The one-sided multiplier of each criterion's standard error over ``pairs`` pairs:
        Student's t at the family-wise quantile (the normal one understates small samples)."""
        return student_t_quantile(family_quantile(self.false_rejection_rate, _CRITERIA), pairs - 1)


class TaskPairs:
    """Two arms' episodes matched by task id: (candidate, baseline) pairs, as they close.

    The candidate arm is ``candidate``'s episodes; the baseline arm is ``baseline``'s
    served in the experiment (a canary's control: live under the share's limits, not
    live's own traffic; a check's: the last-known-good). With ``trial`` (the router's number for the share, ``PairedShare.trial``) both arms
    count only that share's episodes. Episodes without a task id or a final distance
    never pair. The canary stage and the rollback monitor's check pair this way.
    """

    def __init__(self, *, candidate: int, baseline: int, trial: int | None = None) -> None:
        self.candidate = candidate
        self.baseline = baseline
        self.trial = trial
        self._waiting: dict[str, tuple[deque[EpisodeOutcome], deque[EpisodeOutcome]]] = {}
        self.pairs: list[tuple[EpisodeOutcome, EpisodeOutcome]] = []

    def add(self, outcome: EpisodeOutcome) -> None:
        if not outcome.task_id or outcome.final_distance_m is None:
            return
        if self.trial is not None and outcome.trial != self.trial:
            return  # another share's episode, or live outside the experiment
        if outcome.version == self.candidate:
            arm = 0
        elif outcome.version == self.baseline and outcome.experiment:
            arm = 1  # the control: live at the same limits as the canary's
        else:
            return
        waiting = self._waiting.setdefault(outcome.task_id, (deque(), deque()))
        waiting[arm].append(outcome)
        if waiting[0] and waiting[1]:
            self.pairs.append((waiting[0].popleft(), waiting[1].popleft()))


class CanaryEvaluator:
    """Pairs the canary's and the control's episodes by task (:class:`TaskPairs`) and
    judges the pairs."""

    def __init__(
        self, *, candidate: int, baseline: int, config: CanaryConfig, trial: int | None = None
    ) -> None:
        self.candidate = candidate
        self.baseline = baseline
        self.config = config
        self._matched = TaskPairs(candidate=candidate, baseline=baseline, trial=trial)
        self._pairs = self._matched.pairs

    def add(self, outcome: EpisodeOutcome) -> StageVerdict | None:
        """Count one finished episode; returns the verdict when enough pairs are in."""
        if self.ready:
            return None
        self._matched.add(outcome)
        return self.verdict() if self.ready else None

    @property
    def ready(self) -> bool:
        return len(self._pairs) >= self.config.pairs

    @property
    def pair_count(self) -> int:
        return len(self._pairs)

    def verdict(self) -> StageVerdict:
        if len(self._pairs) < 2:
            raise ValueError(
                f"canary of version {self.candidate} has {len(self._pairs)} task pairs; it "
                "needs at least 2 to judge (a pair: one canary and one control episode of one "
                "task)"
            )
        c, n = self.config, len(self._pairs)
        z = c.multiplier(n)
        success = [float(a.success) - float(b.success) for a, b in self._pairs]
        distance = [_distance(a) - _distance(b) for a, b in self._pairs]
        rate = [a.intervention_rate - b.intervention_rate for a, b in self._pairs]
        ret = [a.episode_return - b.episode_return for a, b in self._pairs]
        d_success = paired_difference(success, z=z)
        d_distance = paired_difference(distance, z=z)
        d_rate = paired_difference(rate, z=z)
        measurements = (
            # Fails only when even the optimistic bound is worse than the margin.
            Measurement("success_diff_upper_bound", d_success.upper, -c.success_margin, ">="),
            Measurement(
                "final_distance_diff_lower_bound_m", d_distance.lower, c.distance_margin_m, "<="
            ),
            Measurement(
                "intervention_rate_diff_lower_bound", d_rate.lower, c.intervention_margin, "<="
            ),
        )
        figures = (
            Figure("pairs", float(n)),
            Figure("multiplier", z),
            Figure("success_diff", d_success.diff),
            Figure("canary_success", sum(a.success for a, _ in self._pairs) / n),
            Figure("control_success", sum(b.success for _, b in self._pairs) / n),
            Figure("final_distance_diff_m", d_distance.diff),
            Figure("intervention_rate_diff", d_rate.diff),
            Figure("return_diff", paired_difference(ret, z=z).diff),
        )
        return StageVerdict(
            stage=GateStage.CANARY,
            candidate=self.candidate,
            baseline=self.baseline,
            measurements=measurements,
            samples=2 * n,
            figures=figures,
        )


def _distance(outcome: EpisodeOutcome) -> float:
    assert outcome.final_distance_m is not None  # add() keeps only episodes that have one
    return outcome.final_distance_m
