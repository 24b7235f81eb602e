"""Shadow and canary stages, and the rollback monitor, over real engines and episode records."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest

from tether.policy.bundle import PolicyBundle
from tether.policy.engine import PolicyEngine
from tether.safety.limits import SafetyLimits
from tether.safety.supervisor import Supervisor
from tether.sim import ArmKinematics
from tether.spec import RobotSpec
from tether.versions.records import (
    EpisodeOutcome,
    GateStage,
    LiveChange,
    StageVerdict,
    VersionSource,
    VersionState,
)
from tether.versions.registry import ModelRegistry
from tether.versions.rollback import RollbackConfig, RollbackEvent, RollbackMonitor
from tether.versions.stages.canary import CanaryConfig, CanaryEvaluator
from tether.versions.stages.shadow import ShadowConfig, ShadowEvaluator, ShadowRunner

from .conftest import arm_observations, derived, make_engine, negated, nudged


def outcomes(
    version: int,
    n: int,
    *,
    mean_return: float,
    success: float,
    rate: float,
    seed: int,
    tightened: bool = False,
) -> list[EpisodeOutcome]:
    """``n`` recorded episodes of ``version`` with the given averages (200 steps each);
    ``tightened``: served under a canary's limits (the canary's and its control's)."""
    rng = np.random.default_rng(seed)
    return [
        EpisodeOutcome(
            version=version,
            episode_return=float(rng.normal(mean_return, 5.0)),
            success=bool(rng.random() < success),
            steps=200,
            interventions=int(rng.binomial(200, rate)),
            backups=0,
            tightened=tightened,
        )
        for _ in range(n)
    ]


# ----------------------------------------------------------------------------- shadow


def _shadow_batches(
    live: PolicyEngine, spec: RobotSpec, n_batches: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for b in range(n_batches):
        obs = arm_observations(spec, 25, seed=100 + b)
        out.append((obs, live.act(obs, deterministic=True).actions))
    return out


def test_shadow_rejects_negated_actions_and_passes_a_near_copy(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    live = make_engine(base_bundle)
    bad = make_engine(derived(base_bundle, tmp_path / "bad", 2, "negated", negated))
    good = make_engine(derived(base_bundle, tmp_path / "good", 3, "nudged", nudged))
    cfg = ShadowConfig(steps=100, max_intervention_rate=1.0, max_mean_divergence=0.05)
    verdicts = {}
    for name, engine in (("bad", bad), ("good", good)):
        ev = ShadowEvaluator(engine, supervisor, baseline=1, config=cfg)
        results = [ev.observe(obs, acts) for obs, acts in _shadow_batches(live, spec, 4)]
        assert results[:3] == [None, None, None]  # no verdict before 100 steps
        verdicts[name] = results[3]
    bad_v, good_v = verdicts["bad"], verdicts["good"]
    assert bad_v is not None
    assert good_v is not None
    assert bad_v.stage is GateStage.SHADOW
    assert bad_v.samples == 100
    assert not bad_v.passed
    assert "mean_action_divergence" in bad_v.describe()
    assert good_v.passed


def test_shadow_counts_what_the_supervisor_would_have_changed(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    """The intervention criterion can fail: a saturating candidate trips the supervisor."""

    def saturate(name: str, t: object) -> object:
        return t * 0 + 20.0 if name == "head.mu.bias" else t  # type: ignore[operator]

    live = make_engine(base_bundle)
    loud = make_engine(derived(base_bundle, tmp_path / "loud", 2, "loud", saturate))  # type: ignore[arg-type]
    cfg = ShadowConfig(steps=50, max_intervention_rate=0.05, max_mean_divergence=10.0)
    ev = ShadowEvaluator(loud, supervisor, baseline=1, config=cfg)
    verdict = None
    for obs, acts in _shadow_batches(live, spec, 2):
        verdict = ev.observe(obs, acts, previous_actions=np.zeros_like(acts))
    assert verdict is not None
    rate = {m.name: m for m in verdict.measurements}["would_intervene_rate"]
    assert rate.value > 0.5
    assert not rate.passed


def test_shadow_judges_interventions_against_the_live_policy_on_the_same_observations(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec
) -> None:
    """When the supervisor corrects the live policy too (tight limits: ~30 % here), a near copy
    of it passes: its threshold is the live rate plus the margin, not the absolute bound.
    A saturating candidate still fails against the same, higher bar."""

    def saturate(name: str, t: object) -> object:
        return t * 0 + 20.0 if name == "head.mu.bias" else t  # type: ignore[operator]

    strict = Supervisor(SafetyLimits.from_spec(spec).tightened(0.5), kinematics=ArmKinematics())
    live = make_engine(base_bundle)
    near = make_engine(derived(base_bundle, tmp_path / "near", 2, "near", nudged))
    loud = make_engine(derived(base_bundle, tmp_path / "loud", 3, "loud", saturate))  # type: ignore[arg-type]
    cfg = ShadowConfig(steps=50, max_intervention_rate=0.05, max_mean_divergence=10.0)
    verdicts = {}
    for name, engine in (("near", near), ("loud", loud)):
        ev = ShadowEvaluator(engine, strict, baseline=1, config=cfg)
        for obs, acts in _shadow_batches(live, spec, 2):
            verdict = ev.observe(obs, acts, previous_actions=np.zeros_like(acts))
        assert verdict is not None
        verdicts[name] = {m.name: m for m in verdict.measurements}["would_intervene_rate"]
    assert verdicts["near"].threshold > cfg.max_intervention_rate  # live is corrected too
    assert verdicts["near"].passed
    assert not verdicts["loud"].passed


def test_shadow_runner_works_off_thread_and_drops_instead_of_blocking(
    base_bundle: PolicyBundle, spec: RobotSpec, supervisor: Supervisor
) -> None:
    live = make_engine(base_bundle)
    cfg = ShadowConfig(steps=50, max_mean_divergence=0.0, queue_batches=1)
    got = []
    runner = ShadowRunner(
        ShadowEvaluator(make_engine(base_bundle), supervisor, baseline=1, config=cfg), got.append
    )
    batches = _shadow_batches(live, spec, 4)
    offered = accepted = 0
    for obs, acts in batches * 10:  # a burst far faster than the shadow thread computes
        offered += 1
        accepted += runner.offer(obs, acts)
    assert runner.dropped_batches > 0  # the caller was never made to wait
    deadline = time.monotonic() + 20.0
    while not got and time.monotonic() < deadline:  # then a steady trickle until done
        offered += 1
        accepted += runner.offer(*batches[offered % 4])
        time.sleep(0.01)
    runner.join(5.0)
    assert accepted + runner.dropped_batches == offered
    assert len(got) == 1
    assert got[0].passed  # same weights: zero divergence
    assert got[0].samples >= 50


# ----------------------------------------------------------------------------- canary


def test_canary_promotes_a_better_candidate_and_rejects_a_worse_one() -> None:
    cfg = CanaryConfig(episodes=15, min_live_episodes=15, return_margin=5.0)
    live = outcomes(1, 30, mean_return=-60, success=0.5, rate=0.01, seed=0, tightened=True)
    better = outcomes(2, 15, mean_return=-40, success=0.8, rate=0.01, seed=1, tightened=True)
    worse = outcomes(3, 15, mean_return=-90, success=0.2, rate=0.10, seed=2, tightened=True)
    results = {}
    for cand in (better, worse):
        ev = CanaryEvaluator(candidate=cand[0].version, baseline=1, config=cfg)
        verdict = None
        for a, b in zip(cand, live, strict=False):
            assert verdict is None
            verdict = ev.add(a) or ev.add(b)
        results[cand[0].version] = verdict
    assert results[2] is not None
    assert results[2].passed
    assert results[3] is not None
    assert not results[3].passed
    failed = {m.name for m in results[3].measurements if not m.passed}
    assert failed == {
        "return_diff_lower_bound",
        "success_diff_lower_bound",
        "intervention_rate_diff_upper_bound",
    }


def test_the_canary_is_judged_against_its_control_not_live_at_full_limits() -> None:
    # Measured on the arm with the shipped policy (16 episodes, deterministic): at full
    # limits it is corrected on 54 % of its steps and returns 12.6; under the canary's
    # tightened(0.8) limits, 69 % and -15.8. A copy of live judged against live at full
    # limits carries that handicap into every comparison and fails it.
    cfg = CanaryConfig(episodes=15, min_live_episodes=15, intervention_margin=0.05)
    copy = outcomes(2, 15, mean_return=-16, success=1.0, rate=0.69, seed=1, tightened=True)
    control = outcomes(1, 15, mean_return=-16, success=1.0, rate=0.69, seed=2, tightened=True)
    full = outcomes(1, 15, mean_return=13, success=1.0, rate=0.54, seed=3)

    def judge(live: list[EpisodeOutcome], *, unguarded: bool) -> StageVerdict | None:
        ev = CanaryEvaluator(candidate=2, baseline=1, config=cfg)
        if unguarded:  # what the evaluator did before: any live episode was the reference
            live = [dataclasses.replace(o, tightened=True) for o in live]
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


# ----------------------------------------------------------------------------- rollback


def _live_with_lkg(base: PolicyBundle, tmp_path: Path) -> ModelRegistry[PolicyEngine]:
    reg: ModelRegistry[PolicyEngine] = ModelRegistry()
    reg.register(make_engine(base), source=VersionSource.BUNDLE)
    reg.register(
        make_engine(derived(base, tmp_path / "v2", 2, "v2", nudged)), source=VersionSource.LEARNER
    )
    return reg


def test_sustained_degradation_rolls_back_to_last_known_good(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    reg = _live_with_lkg(base_bundle, tmp_path)
    cfg = RollbackConfig(window_episodes=20, min_episodes=8, sustain_episodes=4)
    monitor = RollbackMonitor(reg, cfg)
    told_learner: list[LiveChange] = []
    reg.add_listener(told_learner.append)
    events: list[RollbackEvent] = []
    monitor.add_listener(events.append)
    for o in outcomes(1, 20, mean_return=-50, success=0.7, rate=0.01, seed=3):
        assert monitor.add(o) is None  # version 1 live: nothing to compare with
    reg.promote(2, "gate passed")
    # Version 2 first performs like 1 (no rollback), then degrades (drift it cannot handle).
    for o in outcomes(2, 10, mean_return=-50, success=0.7, rate=0.01, seed=4):
        assert monitor.add(o) is None
    fired = None
    bad_episodes = 0
    for o in outcomes(2, 30, mean_return=-120, success=0.1, rate=0.2, seed=5):
        bad_episodes += 1
        fired = monitor.add(o)
        if fired is not None:
            break
    assert fired is not None
    assert bad_episodes >= cfg.sustain_episodes  # sustained, not the first bad episode
    assert (fired.from_version, fired.to_version) == (2, 1)
    assert events == [fired]
    live = reg.live()
    assert live is not None
    assert live.id == 1
    assert reg.get(2).state is VersionState.REJECTED
    assert told_learner[-1].kind == "rollback"
    assert told_learner[-1].current.id == 1  # which weights are live now
    assert any(not m.passed for m in fired.measurements)
    assert "FAIL" in fired.describe()


def test_noise_alone_never_rolls_back(base_bundle: PolicyBundle, tmp_path: Path) -> None:
    reg = _live_with_lkg(base_bundle, tmp_path)
    monitor = RollbackMonitor(reg, RollbackConfig(sustain_episodes=3))
    for o in outcomes(1, 30, mean_return=-50, success=0.7, rate=0.01, seed=6):
        monitor.add(o)
    reg.promote(2, "gate passed")
    for o in outcomes(2, 200, mean_return=-52, success=0.65, rate=0.012, seed=7):
        assert monitor.add(o) is None
    live = reg.live()
    assert live is not None
    assert live.id == 2


def test_rollback_without_last_known_good_is_impossible(base_bundle: PolicyBundle) -> None:
    reg: ModelRegistry[PolicyEngine] = ModelRegistry()
    reg.register(make_engine(base_bundle), source=VersionSource.BUNDLE)
    monitor = RollbackMonitor(reg, RollbackConfig(min_episodes=2, sustain_episodes=1))
    for o in outcomes(1, 30, mean_return=-500, success=0.0, rate=0.9, seed=8):
        assert monitor.add(o) is None


@pytest.mark.parametrize("cfg_field", ["window_episodes", "min_episodes"])
def test_rollback_config_refuses_windows_below_two(cfg_field: str) -> None:
    with pytest.raises(ValueError, match=cfg_field):
        RollbackConfig(**{cfg_field: 1})


def test_shadow_compares_deterministic_actions_even_when_live_served_samples(
    base_bundle: PolicyBundle, spec: RobotSpec, supervisor: Supervisor
) -> None:
    """Robots that ask for sampled actions are served the policy's noise. A candidate
    identical to live must not be blamed for it: with the live engine the stage compares
    deterministic actions (divergence 0); judged against the samples, the same copy
    diverges by the noise alone and fails."""
    live = make_engine(base_bundle)
    copy = make_engine(base_bundle)
    cfg = ShadowConfig(steps=50, max_intervention_rate=1.0, max_mean_divergence=0.05)
    divergence = {}
    for name, reference in (("with live engine", live), ("against samples", None)):
        ev = ShadowEvaluator(copy, supervisor, baseline=1, config=cfg, live=reference)
        verdict = None
        for b in range(2):
            obs = arm_observations(spec, 25, seed=300 + b)
            verdict = ev.observe(obs, live.act(obs, deterministic=False).actions)
        assert verdict is not None
        divergence[name] = {m.name: m for m in verdict.measurements}["mean_action_divergence"]
    assert divergence["with live engine"].value == 0.0
    assert divergence["with live engine"].passed
    assert not divergence["against samples"].passed
