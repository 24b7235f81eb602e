"""The server side of the gate end to end: shadow → canary → live, or rejected before acting."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.versions.builders import (
    arm_observations,
    derived,
    make_engine,
    negated,
    nudged,
    outcomes,
)
from tether.policy.bundle import PolicyBundle
from tether.policy.engine import PolicyEngine
from tether.safety.supervisor import Supervisor
from tether.spec import RobotSpec
from tether.versions.errors import VersionError
from tether.versions.records import (
    GateStage,
    Measurement,
    StageVerdict,
    VersionSource,
    VersionState,
)
from tether.versions.registry import ModelRegistry
from tether.versions.routing import Role, TrafficRouter
from tether.versions.server_gate import GateOutcome, ServerGate, ServerGateConfig
from tether.versions.stages.canary import CanaryConfig
from tether.versions.stages.shadow import ShadowConfig

CONFIG = ServerGateConfig(
    shadow=ShadowConfig(steps=60, max_intervention_rate=1.0, max_mean_divergence=0.05),
    # Ten episodes of a binary outcome say little: the stated success margin is wide.
    canary=CanaryConfig(fraction=0.3, episodes=10, min_live_episodes=10, success_margin=0.5),
)


def _system(
    base: PolicyBundle, tmp_path: Path, supervisor: Supervisor
) -> tuple[ModelRegistry[PolicyEngine], TrafficRouter, ServerGate]:
    reg: ModelRegistry[PolicyEngine] = ModelRegistry()
    reg.register(make_engine(base), source=VersionSource.BUNDLE)
    reg.register(
        make_engine(derived(base, tmp_path / "bad", 2, "negated", negated)),
        source=VersionSource.LEARNER,
    )
    reg.register(
        make_engine(derived(base, tmp_path / "good", 3, "nudged", nudged)),
        source=VersionSource.LEARNER,
    )
    router = TrafficRouter(reg)
    return reg, router, ServerGate(reg, router, supervisor, CONFIG)


def _serve_live_batches(
    reg: ModelRegistry[PolicyEngine],
    router: TrafficRouter,
    ctl: ServerGate,
    spec: RobotSpec,
    n: int,
) -> set[int | None]:
    """Serve ``n`` live batches the way the server does; returns the versions routed to."""
    routed: set[int | None] = set()
    for b in range(n):
        obs = arm_observations(spec, 20, seed=b)
        for r in range(20):
            routed.add(router.route(f"robot-{r}", f"ep-{b}").version)
        out = reg.engine_for(None).act(obs, deterministic=True)
        ctl.on_batch(obs, out.actions)
    ctl.wait_shadow(20.0)
    return routed


def _with_canary(
    base: PolicyBundle, tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> tuple[ModelRegistry[PolicyEngine], TrafficRouter, ServerGate]:
    """The near-copy candidate 3 through shadow and into its canary stage."""
    reg, router, ctl = _system(base, tmp_path, supervisor)
    ctl.submit(3)
    _serve_live_batches(reg, router, ctl, spec, 4)
    assert reg.get(3).state is VersionState.CANARY
    return reg, router, ctl


def test_negated_candidate_is_rejected_in_shadow_and_never_routed(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    reg, router, ctl = _system(base_bundle, tmp_path, supervisor)
    finished: list[GateOutcome] = []
    ctl.add_listener(finished.append)
    assert ctl.submit(2) is None
    assert reg.get(2).state is VersionState.SHADOW
    routed = _serve_live_batches(reg, router, ctl, spec, 5)
    assert 2 not in routed  # it never acted on a robot
    assert reg.get(2).state is VersionState.REJECTED
    assert "shadow stage failed" in reg.get(2).reason
    assert "mean_action_divergence" in reg.get(2).reason
    assert [o.promoted for o in finished] == [False]
    assert [v.stage for v in ctl.verdicts(2)] == [GateStage.SHADOW]
    live = reg.live()
    assert live is not None
    assert live.id == 1


def test_good_candidate_goes_shadow_canary_live(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    reg, router, ctl = _with_canary(base_bundle, tmp_path, spec, supervisor)
    share = router.canary()
    assert share is not None
    assert share.version == 3
    # Episodes the router gives the canary are served by it under tightened limits.
    # As many again are its control: live, under the same limits. Live at full limits is
    # not what the canary is judged against.
    decisions = [router.route("robot", f"ep-{e}") for e in range(60)]
    assert {d.role for d in decisions} == {Role.LIVE, Role.CANARY, Role.CONTROL}
    for d in decisions:
        assert d.tightened is (d.role is not Role.LIVE)
        assert d.version == (3 if d.role is Role.CANARY else None)
    outcome = None
    for o in outcomes(1, 20, mean_return=-60, success=0.5, rate=0.01, seed=3):
        assert ctl.on_episode(o) is None  # live at full limits: no verdict from these
    live_eps = outcomes(1, 10, mean_return=-60, success=0.5, rate=0.01, seed=1, tightened=True)
    cand_eps = outcomes(3, 10, mean_return=-55, success=0.6, rate=0.01, seed=2, tightened=True)
    for a, b in zip(live_eps, cand_eps, strict=True):
        outcome = ctl.on_episode(a) or ctl.on_episode(b)
    assert outcome is not None
    assert outcome.promoted
    live = reg.live()
    assert live is not None
    assert live.id == 3
    lkg = reg.last_known_good()
    assert lkg is not None
    assert lkg.id == 1
    assert [v.stage for v in ctl.verdicts(3)] == [GateStage.SHADOW, GateStage.CANARY]
    assert router.canary() is None


def test_failed_learner_stage_rejects_at_once(
    base_bundle: PolicyBundle, tmp_path: Path, supervisor: Supervisor
) -> None:
    reg, _, ctl = _system(base_bundle, tmp_path, supervisor)
    offline = StageVerdict(
        GateStage.OFFLINE, 2, 1, (Measurement("action_kl", 3.0, 0.05, "<="),), samples=256
    )
    outcome = ctl.submit(2, prior=(offline,))
    assert outcome is not None
    assert not outcome.promoted
    assert reg.get(2).state is VersionState.REJECTED
    assert "offline stage failed" in reg.get(2).reason
    assert "action_kl=3" in reg.get(2).reason


def test_newer_candidate_supersedes_one_in_shadow(
    base_bundle: PolicyBundle, tmp_path: Path, supervisor: Supervisor
) -> None:
    reg, _, ctl = _system(base_bundle, tmp_path, supervisor)
    ctl.submit(2)
    ctl.submit(3)
    assert reg.get(2).state is VersionState.RETIRED
    assert reg.get(3).state is VersionState.SHADOW
    assert ctl.candidate == 3


def test_operator_promotion_of_the_canary_ends_its_evaluation(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    reg, router, ctl = _with_canary(base_bundle, tmp_path, spec, supervisor)
    with pytest.raises(VersionError, match="canary stage"):
        reg.unload(3)  # the router still serves canary episodes with it
    reg.promote(3, "operator accepted the canary early")
    assert ctl.candidate is None
    assert router.canary() is None
    for o in outcomes(3, 40, mean_return=-50, success=0.5, rate=0.0, seed=3):
        assert ctl.on_episode(o) is None  # the abandoned canary never decides again
    live = reg.live()
    assert live is not None
    assert live.id == 3


def test_a_rollback_during_shadow_abandons_the_evaluation(
    base_bundle: PolicyBundle, tmp_path: Path, supervisor: Supervisor
) -> None:
    reg, _, ctl = _system(base_bundle, tmp_path, supervisor)
    reg.promote(2, "setup: 2 live, 1 last-known-good")
    ctl.submit(3)
    assert reg.get(3).state is VersionState.SHADOW
    reg.rollback("return dropped")
    assert ctl.candidate is None
    assert reg.get(3).state is VersionState.RETIRED
    assert "evaluation abandoned" in reg.get(3).reason


def test_promote_directly_skips_the_gate_and_says_so(
    base_bundle: PolicyBundle, tmp_path: Path, supervisor: Supervisor
) -> None:
    from tether.versions.facade import PolicyVersions, VersionsConfig

    versions = PolicyVersions(
        VersionsConfig(),
        engine_factory=make_engine,
        shadow_supervisor=supervisor.with_limits(supervisor.limits),
    )
    versions.load(tmp_path / "base")
    engine = make_engine(derived(base_bundle, tmp_path / "v2", 2, "v2", nudged))
    record = versions.submit_candidate(engine, promote_directly=True)
    assert record.state is VersionState.LIVE
    assert "WITHOUT the promotion gate" in record.reason
    gated = make_engine(derived(base_bundle, tmp_path / "v3", 3, "v3", nudged))
    assert versions.submit_candidate(gated).state is VersionState.SHADOW
