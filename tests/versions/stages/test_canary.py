"""The canary stage over episode records: paired by task with its control, harm tests."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.versions.builders import outcomes
from tether.runtime.config import RunConfig
from tether.versions.records import EpisodeOutcome, StageVerdict
from tether.versions.stages.canary import CanaryConfig, CanaryEvaluator

SERVING = CanaryConfig()
RUN = RunConfig().versions.promotion.canary  # the default `tether run`'s canary


def _task_outcome(
    rng: np.random.Generator,
    version: int,
    task: int,
    p_success: float,
    distance_m: float,
    *,
    negated: bool = False,
    improved: bool = False,
) -> EpisodeOutcome:
    """One episode of a task whose difficulty (``p_success``, ``distance_m``) both arms share."""
    if negated:  # flipped torques: the arm moves away from the target
        success, distance = False, distance_m + rng.uniform(0.2, 0.4)
    elif improved:  # adapted to the drift: succeeds more often, ends closer
        success = bool(rng.random() < min(1.0, p_success + 0.3))
        distance = abs(0.5 * distance_m + rng.normal(0, 0.03))
    else:
        success, distance = bool(rng.random() < p_success), abs(distance_m + rng.normal(0, 0.03))
    return EpisodeOutcome(
        version=version,
        episode_return=float(rng.normal(0.0, 100.0)),  # the noisy figure: never judged
        success=success,
        steps=200,
        interventions=int(rng.binomial(200, 0.9 if negated else 0.3)),
        backups=0,
        tightened=True,
        trial=1,
        task_id=f"task-{task}",
        final_distance_m=float(distance),
    )


def _trial(
    config: CanaryConfig, seed: int, *, negated: bool = False, improved: bool = False
) -> StageVerdict:
    """One canary period: each pair is one task run by the canary (2) and the control (1)."""
    rng = np.random.default_rng(seed)
    ev = CanaryEvaluator(candidate=2, baseline=1, config=config)
    verdict = None
    for k in range(config.pairs):
        p, d = rng.uniform(0.05, 0.95), rng.uniform(0.0, 0.2)
        arms = [2, 1]
        if rng.random() < 0.5:
            arms.reverse()  # the router draws which arm runs the task first
        for version in arms:
            assert verdict is None
            cand = version == 2
            verdict = ev.add(
                _task_outcome(
                    rng, version, k, p, d, negated=cand and negated, improved=cand and improved
                )
            )
    assert verdict is not None
    return verdict


@pytest.mark.parametrize("config", [SERVING, RUN], ids=["serving", "tether-run"])
def test_a_copy_of_live_is_rejected_in_at_most_five_percent_of_trials(config: CanaryConfig) -> None:
    trials = 2000
    rejected = sum(not _trial(config, seed).passed for seed in range(trials))
    assert rejected / trials <= config.false_rejection_rate


def test_without_the_small_sample_correction_a_copy_fails_more_often_than_stated() -> None:
    # The guard above is Student's t; with the normal quantile over the run's 8 pairs the
    # same trials fail a copy of live more often than the 5 % the config states.
    class NormalQuantile(CanaryConfig):
        def multiplier(self, pairs: int) -> float:
            from statistics import NormalDist

            return NormalDist().inv_cdf(1 - self.false_rejection_rate / 3)

    normal = NormalQuantile(**RUN.model_dump())
    rejected = sum(not _trial(normal, seed).passed for seed in range(2000))
    assert rejected / 2000 > RUN.false_rejection_rate


@pytest.mark.parametrize("config", [SERVING, RUN], ids=["serving", "tether-run"])
def test_a_candidate_with_negated_actions_is_always_rejected(config: CanaryConfig) -> None:
    for seed in range(300):
        verdict = _trial(config, seed, negated=True)
        assert not verdict.passed
        failed = {m.name for m in verdict.measurements if not m.passed}
        assert "final_distance_diff_lower_bound_m" in failed


@pytest.mark.parametrize("config", [SERVING, RUN], ids=["serving", "tether-run"])
def test_a_clear_improvement_passes(config: CanaryConfig) -> None:
    verdicts = [_trial(config, seed, improved=True) for seed in range(300)]
    # Better on success and distance, the same on interventions: what can still reject it
    # is the intervention test's own false alarm, at most the stated rate.
    rejected = sum(not v.passed for v in verdicts)
    assert rejected / len(verdicts) <= config.false_rejection_rate / 3
    for v in verdicts:
        failed = {m.name for m in v.measurements if not m.passed}
        assert failed <= {"intervention_rate_diff_lower_bound"}
    estimates = [{f.name: f.value for f in v.figures}["final_distance_diff_m"] for v in verdicts]
    assert sum(e < 0.0 for e in estimates) > 0.9 * len(estimates)  # its numbers say better


def test_every_verdict_keeps_its_numbers_and_the_return_is_only_reported() -> None:
    verdict = _trial(RUN, 0)
    by_name = {m.name: m for m in verdict.measurements}
    assert set(by_name) == {
        "success_diff_upper_bound",
        "final_distance_diff_lower_bound_m",
        "intervention_rate_diff_lower_bound",
    }
    assert by_name["success_diff_upper_bound"].direction == ">="
    assert by_name["success_diff_upper_bound"].threshold == -RUN.success_margin
    assert by_name["final_distance_diff_lower_bound_m"].direction == "<="
    figures = {f.name for f in verdict.figures}
    assert {"return_diff", "pairs", "success_diff", "final_distance_diff_m"} <= figures
    assert verdict.samples == 2 * RUN.pairs
    text = verdict.describe()
    assert "must be >=" in text
    assert "reported: " in text
    assert "return_diff=" in text


def test_only_episodes_paired_by_task_count() -> None:
    cfg = CanaryConfig(pairs=5)
    control = outcomes(1, 5, mean_return=0, success=0.5, rate=0.1, seed=0, tightened=True)
    cand = outcomes(2, 5, mean_return=0, success=0.5, rate=0.1, seed=1, tightened=True)
    ev = CanaryEvaluator(candidate=2, baseline=1, config=cfg)
    for a, b in zip(cand, control, strict=True):  # no task ids: nothing pairs
        assert ev.add(a) is None
        assert ev.add(b) is None
    assert ev.pair_count == 0
    full = outcomes(1, 5, mean_return=0, success=0.5, rate=0.1, seed=2, tasks=True)
    cand = outcomes(2, 5, mean_return=0, success=0.5, rate=0.1, seed=1, tightened=True, tasks=True)
    for a, b in zip(cand, full, strict=True):  # live outside the experiment is not the control
        assert ev.add(a) is None
        assert ev.add(b) is None
    assert ev.pair_count == 0
    no_distance = [
        dataclasses.replace(o, tightened=True, trial=1, final_distance_m=None) for o in full
    ]
    for o in no_distance:
        assert ev.add(o) is None
    assert ev.pair_count == 0
    control = outcomes(
        1, 5, mean_return=0, success=0.5, rate=0.1, seed=3, tightened=True, tasks=True
    )
    verdict = None
    for o in reversed(control):  # any order: pairs match by task
        verdict = ev.add(o)
    assert verdict is not None
    assert ev.pair_count == 5


def test_a_control_at_the_live_limits_pairs_as_the_control() -> None:
    """At ``safety_tightening`` 1.0 the control's episodes are not tightened; what makes
    them the control is that the router served them as the experiment's live arm."""
    cfg = CanaryConfig(pairs=5, safety_tightening=1.0)
    ev = CanaryEvaluator(candidate=2, baseline=1, config=cfg)
    control = outcomes(1, 5, mean_return=0, success=0.5, rate=0.1, seed=0, tasks=True)
    cand = outcomes(2, 5, mean_return=0, success=0.5, rate=0.1, seed=1, tasks=True)
    verdicts = []
    for a, b in zip(cand, control, strict=True):
        verdicts += [ev.add(dataclasses.replace(a, trial=1))]
        verdicts += [ev.add(dataclasses.replace(b, trial=1))]
    assert ev.pair_count == 5
    assert verdicts[-1] is not None


def test_the_canary_is_judged_against_its_control_not_live_at_full_limits() -> None:
    # Under tightened limits the supervisor corrects more steps than at full limits; a
    # copy of live judged against live at full limits carries that handicap and fails.
    cfg = CanaryConfig(pairs=15, intervention_margin=0.05)
    copy = outcomes(
        2, 15, mean_return=-16, success=1.0, rate=0.69, seed=1, tightened=True, tasks=True
    )
    control = outcomes(
        1, 15, mean_return=-16, success=1.0, rate=0.69, seed=2, tightened=True, tasks=True
    )
    full = outcomes(1, 15, mean_return=13, success=1.0, rate=0.54, seed=3, tasks=True)

    def judge(live: list[EpisodeOutcome], *, unguarded: bool) -> StageVerdict | None:
        ev = CanaryEvaluator(candidate=2, baseline=1, config=cfg)
        if unguarded:  # any live episode as the reference
            live = [dataclasses.replace(o, tightened=True, trial=1) for o in live]
        verdict = None
        for a, b in zip(copy, live, strict=True):
            verdict = ev.add(a) or ev.add(b)
        return verdict

    against_full = judge(full, unguarded=True)
    assert against_full is not None
    assert not against_full.passed
    assert judge(full, unguarded=False) is None  # full-limit episodes are not its reference
    against_control = judge(control, unguarded=False)
    assert against_control is not None
    assert against_control.passed, against_control.describe()


def test_with_a_trial_only_that_shares_episodes_count() -> None:
    """A control episode still in flight from the share before (a rollback check, or the
    previous canary) ends after this canary started: live on the same task, but not this
    canary's control. Without the trial filter it would pair."""
    cfg = CanaryConfig(pairs=5, safety_tightening=1.0)
    cand = [
        dataclasses.replace(o, trial=7)
        for o in outcomes(2, 5, mean_return=0, success=0.5, rate=0.1, seed=1, tasks=True)
    ]
    stale = [
        dataclasses.replace(o, trial=6)
        for o in outcomes(1, 5, mean_return=0, success=0.5, rate=0.1, seed=0, tasks=True)
    ]
    for trial, expected in ((7, 0), (None, 5)):
        ev = CanaryEvaluator(candidate=2, baseline=1, config=cfg, trial=trial)
        for a, b in zip(cand, stale, strict=True):
            ev.add(a)
            ev.add(b)
        assert ev.pair_count == expected
