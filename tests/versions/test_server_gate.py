"""The server side of the gate end to end: shadow → canary → live, or rejected before acting."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
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
    EpisodeOutcome,
    GateStage,
    Measurement,
    StageVerdict,
    VersionSource,
    VersionState,
)
from tether.versions.registry import ModelRegistry
from tether.versions.rollback import RollbackConfig, RollbackMonitor
from tether.versions.routing import Role, RouteDecision, TrafficRouter
from tether.versions.server_gate import GateOutcome, ServerGate, ServerGateConfig
from tether.versions.stages.canary import CanaryConfig
from tether.versions.stages.shadow import ShadowConfig

CONFIG = ServerGateConfig(
    shadow=ShadowConfig(steps=60, max_intervention_rate=1.0, max_mean_divergence=0.05),
    canary=CanaryConfig(fraction=0.3, pairs=10),
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
    decisions = [router.route("robot", f"ep-{e}", f"task-{e % 7}") for e in range(60)]
    assert {d.role for d in decisions} == {Role.LIVE, Role.CANARY, Role.CONTROL}
    for d in decisions:
        assert d.tightened is (d.role is not Role.LIVE)
        assert d.version == (3 if d.role is Role.CANARY else None)
    outcome = None
    for o in outcomes(1, 20, mean_return=-60, success=0.5, rate=0.01, seed=3, tasks=True):
        assert ctl.on_episode(o) is None  # live at full limits: no verdict from these
    live_eps = outcomes(
        1, 10, mean_return=-60, success=0.5, rate=0.01, seed=1, tightened=True, tasks=True
    )
    cand_eps = outcomes(
        3, 10, mean_return=-55, success=0.6, rate=0.01, seed=2, tightened=True, tasks=True
    )
    for a, b in zip(live_eps, cand_eps, strict=True):
        a, b = (dataclasses.replace(o, trial=share.trial) for o in (a, b))  # as served
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
    # The promotion's reason keeps the canary's numbers, as a rejection's does.
    assert "canary stage passed" in reg.get(3).reason
    assert "success_diff_upper_bound=" in reg.get(3).reason


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
    for o in outcomes(3, 40, mean_return=-50, success=0.5, rate=0.0, seed=3, tasks=True):
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


def _run_tasks(
    router: TrafficRouter,
    ctl: ServerGate,
    episodes: int,
    outcome_of: Callable[[Role, int | None, int], EpisodeOutcome],
) -> list[RouteDecision]:
    """``episodes`` episodes of one robot that runs each of 6 tasks twice in a row, routed
    by ``router``; ``outcome_of(role, version, task)`` says how each went."""
    decisions = []
    for e in range(episodes):
        task = (e // 2) % 6
        decision = router.route("robot-1", f"ep-{e}", f"task-{task}")
        decisions.append(decision)
        outcome = outcome_of(decision.role, decision.version, task)
        ctl.on_episode(dataclasses.replace(outcome, trial=decision.trial))  # as served
    return decisions


def _episode(
    version: int, task: int, *, success: bool, distance_m: float, tightened: bool
) -> EpisodeOutcome:
    return EpisodeOutcome(
        version=version,
        episode_return=0.0,
        success=success,
        steps=200,
        interventions=20,
        backups=0,
        tightened=tightened,
        trial=int(tightened),
        task_id=f"task-{task}",
        final_distance_m=distance_m,
    )


def test_a_negated_candidate_that_passes_shadow_is_rejected_by_its_canary_and_never_goes_live(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    # Shadow made permissive on purpose, so only the canary stands between it and live.
    permissive = ServerGateConfig(
        shadow=ShadowConfig(steps=60, max_intervention_rate=1.0, max_mean_divergence=10.0),
        canary=CanaryConfig(fraction=0.5, pairs=8),
    )
    reg, router, _ = _system(base_bundle, tmp_path, supervisor)
    ctl = ServerGate(reg, router, supervisor, permissive)
    ctl.submit(2)
    _serve_live_batches(reg, router, ctl, spec, 4)
    assert reg.get(2).state is VersionState.CANARY

    def outcome_of(role: Role, version: int | None, task: int) -> EpisodeOutcome:
        if role is Role.CANARY:  # flipped torques: the arm ends far from the target
            return _episode(2, task, success=False, distance_m=0.4, tightened=True)
        return _episode(
            1, task, success=task % 2 == 0, distance_m=0.05, tightened=role is Role.CONTROL
        )

    decisions = _run_tasks(router, ctl, 60, outcome_of)
    assert reg.get(2).state is VersionState.REJECTED
    assert "canary stage failed" in reg.get(2).reason
    assert "final_distance_diff_lower_bound_m" in reg.get(2).reason
    live = reg.live()
    assert live is not None
    assert live.id == 1
    served_by_2 = [d for d in decisions if d.version == 2]
    assert served_by_2
    assert all(d.role is Role.CANARY and d.tightened for d in served_by_2)
    assert len(served_by_2) <= 8  # its share, for its pairs only, never full traffic
    assert all(router.route("robot-1", f"after-{e}", "task-0").version != 2 for e in range(50))


def test_a_promoted_version_that_then_degrades_is_rolled_back(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    reg, router, ctl = _with_canary(base_bundle, tmp_path, spec, supervisor)
    monitor = RollbackMonitor(
        reg, RollbackConfig(window_episodes=15, min_episodes=8, sustain_episodes=3)
    )
    degraded = False

    def outcome_of(role: Role, version: int | None, task: int) -> EpisodeOutcome:
        v = 3 if role is Role.CANARY else (version or reg.live().id)  # type: ignore[union-attr]
        good = not (degraded and v == 3)
        return _episode(
            v, task, success=good, distance_m=0.05 if good else 0.3, tightened=role is not Role.LIVE
        )

    for e in range(40):  # version 1 live at full limits, before and around the canary
        o = _episode(1, e % 6, success=True, distance_m=0.05, tightened=False)
        monitor.add(o)
    _run_tasks(router, ctl, 40, outcome_of)
    live = reg.live()
    assert live is not None
    assert live.id == 3, reg.get(3).reason
    degraded = True  # e.g. the robot's dynamics changed in a way version 3 handles badly
    events = []
    for e in range(30):
        o = outcome_of(Role.LIVE, None, e % 6)
        event = monitor.add(o)
        if event is not None:
            events.append(event)
            break
    assert len(events) == 1
    live = reg.live()
    assert live is not None
    assert live.id == 1
    failed = [m for m in events[0].measurements if not m.passed]
    assert failed
    assert all(m.direction in ("<=", ">=") for m in failed)
    assert "success_diff_upper_bound" in events[0].describe()


def test_a_canary_that_passes_shadow_during_a_rollback_check_waits_and_counts_only_its_own_pairs(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    """A check's live episodes are live on the same tasks as a canary's control would be;
    one that ends after the canary started must not be taken for the canary's control."""
    reg, router, ctl = _system(base_bundle, tmp_path, supervisor)
    reg.register(
        make_engine(derived(base_bundle, tmp_path / "v4", 4, "v4", nudged)),
        source=VersionSource.LEARNER,
    )
    reg.promote(4, "test")  # version 1 is the last-known-good
    check = router.start_check(1, 0.5)
    assert check is not None
    in_flight = [router.route("robot-1", f"check-{e}", f"task-{e // 2}") for e in range(12)]
    ctl.submit(3)
    _serve_live_batches(reg, router, ctl, spec, 4)
    assert reg.get(3).state is VersionState.CANARY
    assert router.canary() is None  # its share waits for the check
    router.stop_check(check.trial)
    share = router.canary()
    assert share is not None
    assert share.version == 3
    assert share.trial != check.trial
    # The check's live arm finishes now, after the canary started, far closer to its
    # targets than live does later: taken for the canary's control it would fail the
    # canary on distance.
    for e, d in enumerate(in_flight):
        if d.role is Role.CONTROL:
            o = _episode(4, e // 2, success=True, distance_m=0.0, tightened=False)
            assert ctl.on_episode(dataclasses.replace(o, trial=d.trial)) is None

    def outcome_of(role: Role, version: int | None, task: int) -> EpisodeOutcome:
        if role is Role.CANARY:  # as good as live: the canary passes on its own pairs
            return _episode(3, task, success=True, distance_m=0.1, tightened=True)
        return _episode(4, task, success=True, distance_m=0.1, tightened=role is Role.CONTROL)

    _run_tasks(router, ctl, 40, outcome_of)
    outcome = ctl.outcomes[-1]
    assert outcome.version == 3
    assert outcome.promoted
    canary = outcome.verdicts[-1]
    assert canary.stage is GateStage.CANARY
    assert canary.samples == 2 * CONFIG.canary.pairs  # its own pairs, none of the check's
