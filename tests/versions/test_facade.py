"""PolicyVersions end to end: the full gate on the simulated arm, and SIGHUP reload under load."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import threading
from pathlib import Path

import numpy as np
import torch

from tests.versions.builders import (
    arm_observations,
    derived,
    make_engine,
    negated,
    nudged,
    reaching_bundle,
)
from tether.policy.bundle import PolicyBundle
from tether.safety.supervisor import Supervisor
from tether.sim.config import ArmEnvConfig
from tether.sim.env import ArmEnv
from tether.spec import RobotSpec
from tether.versions.facade import PolicyVersions, VersionsConfig
from tether.versions.learner_gate import LearnerGate, LearnerGateConfig
from tether.versions.model_dir import install_sighup_reload
from tether.versions.records import EpisodeOutcome, GateStage, LiveChange, VersionState
from tether.versions.rollback import RollbackConfig
from tether.versions.routing import Role
from tether.versions.server_gate import ServerGateConfig
from tether.versions.stages.canary import CanaryConfig
from tether.versions.stages.offline import OfflineStageConfig
from tether.versions.stages.shadow import ShadowConfig
from tether.versions.stages.simulation import SimulationStageConfig


def _episode(
    versions: PolicyVersions,
    env: ArmEnv,
    supervisor: Supervisor,
    canary_supervisor: Supervisor,
    session: str,
    episode: int,
    routed: list[Role],
) -> EpisodeOutcome:
    """One episode served the way the server serves a Control session; the robot runs
    each task (env seed) twice in a row and declares it, as ``tether run`` does."""
    task = episode // 2
    decision = versions.route(session, f"ep-{episode}", f"seed-{task}")
    routed.append(decision.role)
    engine = versions.engine_for_route(decision)
    guard = canary_supervisor if decision.tightened else supervisor
    obs, _ = env.reset(seed=task)
    total, interventions, backups, previous = 0.0, 0, 0, None
    success, done, steps = False, False, 0
    while not done:
        out = engine.act(obs[None, :], deterministic=True)
        versions.on_batch(
            out.version.id, obs[None, :], out.actions, None if previous is None else previous[None]
        )
        action, verdict = guard.filter(obs, out.actions[0], previous)
        versions.on_step(out.version.id, verdict)
        interventions += int(verdict.intervened)
        backups += int(verdict.source.value == "backup")
        obs, reward, terminated, truncated, info = env.step(action)
        previous, total, steps = action, total + float(reward), steps + 1
        success, done = bool(info["success"]), terminated or truncated
    outcome = EpisodeOutcome(
        out.version.id,
        total,
        success,
        steps,
        interventions,
        backups,
        decision.tightened,
        decision.trial,
        task_id=f"seed-{task}",
        final_distance_m=env.episode_outcome().final_distance_m,
    )
    versions.on_episode(outcome)
    return outcome


def test_a_better_policy_passes_every_stage_and_goes_live(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    config = VersionsConfig(
        promotion=ServerGateConfig(
            # A different policy, not a small learner step: divergence is expected, and
            # its commands differ from what the random policy just executed by more than
            # the rate limit allows on ~80% of steps (measured: 0.805). A queue that holds
            # a whole episode keeps the numbers deterministic.
            shadow=ShadowConfig(
                steps=200, max_intervention_rate=0.9, max_mean_divergence=2.0, queue_batches=256
            ),
            # Canary steps run under tightened limits and live ones do not, and the
            # reaching controller drives the arm hard where the random policy barely
            # moves: under the tightened limits 60-70% of its steps are corrected
            # (measured), against ~0 for the live policy. The stated intervention margin
            # allows for that; success and final distance keep their default margins.
            canary=CanaryConfig(fraction=0.5, pairs=3, intervention_margin=0.9),
        )
    )
    versions = PolicyVersions(
        config,
        engine_factory=make_engine,
        shadow_supervisor=supervisor.with_limits(supervisor.limits),
    )  # the shadow thread gets its own supervisor: one is not shared across threads
    versions.load(tmp_path / "base")  # a randomly initialized policy is live
    reach = make_engine(reaching_bundle(spec, tmp_path / "r"))
    # Learner side: offline (wide trust region: this is a new policy) and simulation.
    gate = LearnerGate(
        LearnerGateConfig(
            offline=OfflineStageConfig(max_action_change=2.0, max_kl=1e4),
            simulation=SimulationStageConfig(episodes=3, success_margin=0.5),
        ),
        supervisor=supervisor,
    )
    prior = gate.evaluate(reach, versions.live_engine(), arm_observations(spec, 128, seed=0))
    assert all(v.passed for v in prior)
    record = versions.submit_candidate(reach, prior)
    assert record.state is VersionState.SHADOW
    env = ArmEnv(config=ArmEnvConfig(command_interface="torque"))
    canary_supervisor = supervisor.with_limits(
        supervisor.limits.tightened(config.promotion.canary.safety_tightening)
    )
    routed: list[Role] = []
    for episode in range(40):
        _episode(versions, env, supervisor, canary_supervisor, "robot-1", episode, routed)
        versions.promotion.wait_shadow(10.0)
        live = versions.registry.live()
        assert live is not None
        if live.id == record.id:
            break
    final = versions.registry.get(record.id)
    assert final.state is VersionState.LIVE, final.reason
    stages = [v.stage for v in versions.promotion.verdicts(record.id)]
    assert stages == [GateStage.OFFLINE, GateStage.SIMULATION, GateStage.SHADOW, GateStage.CANARY]
    assert Role.CANARY in routed
    # It acted only after shadow passed: the first episode cannot have been a canary one.
    assert routed[0] is Role.LIVE
    lkg = versions.registry.last_known_good()
    assert lkg is not None
    assert lkg.id == 1


def test_a_negated_policy_never_acts_even_with_learner_stages_off(
    tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    # The shadow queue holds every batch of both episodes, so none is dropped when the
    # shadow thread falls behind on a busy machine (the verdict needs 200 of them).
    config = VersionsConfig(
        promotion=ServerGateConfig(
            shadow=ShadowConfig(steps=200, max_mean_divergence=0.25, queue_batches=1024)
        )
    )
    versions = PolicyVersions(
        config,
        engine_factory=make_engine,
        shadow_supervisor=supervisor.with_limits(supervisor.limits),
    )
    reach_bundle = reaching_bundle(spec, tmp_path / "r")
    versions.load(reach_bundle.path)  # type: ignore[arg-type]
    flipped = make_engine(derived(reach_bundle, tmp_path / "flip", 3, "flipped", negated))
    record = versions.submit_candidate(flipped)  # no offline/simulation verdicts at all
    env = ArmEnv(config=ArmEnvConfig(command_interface="torque"))
    routed: list[Role] = []
    for episode in range(2):
        _episode(versions, env, supervisor, supervisor, "robot-1", episode, routed)
        versions.promotion.wait_shadow(10.0)
    assert versions.registry.get(record.id).state is VersionState.REJECTED
    assert routed == [Role.LIVE] * 2
    assert versions.registry.metrics(record.id).steps == 0  # not one step executed
    reason = versions.registry.get(record.id).reason
    assert "shadow stage failed" in reason
    assert "mean_action_divergence" in reason


def test_sighup_reload_under_load_fails_no_request(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copytree(tmp_path / "base", models / "base")
    config = VersionsConfig(model_dir=models, reload_makes_live=True)
    versions = PolicyVersions(config, engine_factory=make_engine, shadow_supervisor=supervisor)
    versions.reload()
    obs = arm_observations(spec, 8, seed=3)
    failures: list[BaseException] = []
    served: dict[int, int] = {}
    stop = threading.Event()

    def robots() -> None:
        while not stop.is_set():
            try:
                out = versions.engine_for(None).act(obs, deterministic=True)
                served[out.version.id] = served.get(out.version.id, 0) + 1
            except BaseException as exc:
                failures.append(exc)

    async def operate() -> None:
        install_sighup_reload(versions.reload)
        for i in (2, 3):
            derived(base_bundle, models / f"v{i}", i, f"v{i}", lambda k, t, i=i: nudged(k, t) * i)
            os.kill(os.getpid(), signal.SIGHUP)
            for _ in range(500):
                await asyncio.sleep(0.01)
                live = versions.registry.live()
                # Live, and served at least once: the robots keep running until then,
                # however the threads happen to be scheduled around the swap.
                if live is not None and live.id == i and served.get(i, 0) > 0:
                    break
        asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)

    threads = [threading.Thread(target=robots) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        asyncio.run(operate())
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert failures == []
    live = versions.registry.live()
    assert live is not None
    assert live.id == 3
    assert served.keys() >= {1, 3}
    assert np.all([versions.registry.get(v).loaded for v in (1, 2, 3)])


def _flip_base_yaw(name: str, t: torch.Tensor) -> torch.Tensor:
    """The base joint pushes the wrong way: the arm no longer turns toward its target."""
    if name.startswith("head.mu."):
        t = t.clone()
        t[0] = -t[0]
    return t


def test_a_live_version_that_degrades_on_the_arm_is_rolled_back(
    tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    config = VersionsConfig(
        rollback=RollbackConfig(window_episodes=8, min_episodes=6, sustain_episodes=2)
    )
    versions = PolicyVersions(config, engine_factory=make_engine, shadow_supervisor=supervisor)
    good = reaching_bundle(spec, tmp_path / "r")
    versions.load(good.path)  # type: ignore[arg-type]
    env = ArmEnv(config=ArmEnvConfig(command_interface="torque"))
    routed: list[Role] = []
    for episode in range(6):  # the good version's record while it is live
        _episode(versions, env, supervisor, supervisor, "robot-1", episode, routed)
    broken = derived(good, tmp_path / "broken", 3, "broken-yaw", _flip_base_yaw)
    # An operator pushes it live past the gate; the robot shows the damage.
    versions.load(broken.path, make_live=True)  # type: ignore[arg-type]
    told: list[LiveChange] = []
    versions.add_live_listener(told.append)
    for episode in range(6, 30):
        _episode(versions, env, supervisor, supervisor, "robot-1", episode, routed)
        if versions.rollback.events:
            break
    assert len(versions.rollback.events) == 1
    event = versions.rollback.events[0]
    assert (event.from_version, event.to_version) == (3, 2)
    assert told[-1].kind == "rollback"
    assert told[-1].current.id == 2
    assert versions.registry.get(3).state is VersionState.REJECTED
    assert "rolled back" in versions.registry.get(3).reason


def test_the_rollback_monitor_watches_live_at_the_base_limits_its_canary_control_included(
    tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    """Live's episodes at the base limits fill its window, those it served as a canary's
    control among them (a learner that publishes often keeps a canary running most of
    the time, tether run's nearly all of it); tightened episodes and the candidate's do not."""
    config = VersionsConfig(
        rollback=RollbackConfig(window_episodes=8, min_episodes=2, sustain_episodes=1)
    )
    versions = PolicyVersions(config, engine_factory=make_engine, shadow_supervisor=supervisor)
    bundle = reaching_bundle(spec, tmp_path / "r")
    live = versions.load(bundle.path)  # type: ignore[arg-type]
    candidate = versions.load(derived(bundle, tmp_path / "c", 3, "c", nudged).path).id

    def outcome(version: int, *, trial: int, tightened: bool = False) -> EpisodeOutcome:
        return EpisodeOutcome(version, 0.0, True, 100, 0, 0, tightened=tightened, trial=trial)

    for _ in range(4):
        versions.on_episode(outcome(live.id, trial=1, tightened=True))  # a canary at 0.9
        versions.on_episode(outcome(candidate, trial=1))  # the canary's own arm
    assert versions.rollback.compare(live.id, live.id) is None  # nothing recorded
    assert versions.rollback.compare(candidate, candidate) is None
    for _ in range(2):
        versions.on_episode(outcome(live.id, trial=1))  # its control at the base limits
    assert versions.rollback.compare(live.id, live.id) is not None
