"""The shadow stage over real engines: what the candidate would have done, never executed."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from tests.versions.builders import (
    arm_observations,
    derived,
    make_engine,
    negated,
    nudged,
)
from tether.policy.bundle import PolicyBundle
from tether.policy.engine import PolicyEngine
from tether.safety.limits import SafetyLimits
from tether.safety.supervisor import Supervisor
from tether.sim import ArmKinematics
from tether.spec import RobotSpec
from tether.versions.records import (
    GateStage,
)
from tether.versions.stages.shadow import ShadowConfig, ShadowEvaluator, ShadowRunner


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


def test_the_shadow_does_not_count_the_check_it_cannot_judge() -> None:
    """Two position-arm robots, each with its own supervisor, run the shipped policy; the
    shadow sees their rows in turn with each one's previous executed command. It cannot
    know a robot's command before that, so its acceleration check measures the shadow:
    counted, even the live policy's own actions look corrected on most steps."""
    from tether.assets import pretrained_bundle_path
    from tether.policy import load_bundle
    from tether.safety.for_spec import supervisor_for
    from tether.safety.verdict import SafetyCheck
    from tether.sim import ArmEnv, ArmEnvConfig, arm_spec

    spec = arm_spec("position")
    live = PolicyEngine(load_bundle(pretrained_bundle_path()))
    envs = [ArmEnv(config=ArmEnvConfig(command_interface="position"), seed=s) for s in (0, 1)]
    sups = [supervisor_for(spec) for _ in envs]
    obs = [env.reset(seed=10 + i)[0] for i, env in enumerate(envs)]
    previous: list[np.ndarray | None] = [None, None]
    batches: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for _ in range(150):
        acts = live.act(np.stack(obs), deterministic=True).actions
        if previous[0] is not None and previous[1] is not None:
            batches.append((np.stack(obs), acts, np.stack(previous)))  # type: ignore[arg-type]
        for i, env in enumerate(envs):
            executed, _ = sups[i].filter(obs[i], acts[i], previous[i])
            previous[i] = executed
            obs[i] = env.step(executed)[0]

    def live_rate(config: ShadowConfig, *, all_checks: bool = False) -> float:
        supervisor = supervisor_for(spec)
        if all_checks:  # the guard removed: every check counted
            supervisor.checks_needing_history = SafetyCheck.NONE  # type: ignore[union-attr]
        ev = ShadowEvaluator(live, supervisor, baseline=1, config=config, live=live)
        verdict = None
        for o, a, p in batches:
            verdict = ev.observe(o, a, p) or verdict
        assert verdict is not None
        return next(m.value for m in verdict.measurements if m.name == "would_intervene_rate")

    steps = 2 * len(batches) - 2
    assert live_rate(ShadowConfig(steps=steps)) <= 0.05
    assert live_rate(ShadowConfig(steps=steps), all_checks=True) > 0.2
