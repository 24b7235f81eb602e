"""A server routed by the registry: canary episodes, pinned sessions, and episode feedback.

The registry (``PolicyVersions``) is the server's model source *and* its router: a
canary serves whole episodes (sticky per episode) and the robot's episode outcomes,
success included, reach the registry through the Control stream itself.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.serving.serving_harness import RunningServer
from tests.versions.builders import arm_observations, derived, make_engine, nudged
from tether.policy.bundle import PolicyBundle
from tether.safety.supervisor import Supervisor
from tether.serving.client import PolicyClient
from tether.serving.config import AdmissionConfig, ServerConfig
from tether.serving.launch import build_server
from tether.spec import RobotSpec
from tether.versions.facade import PolicyVersions, VersionsConfig
from tether.versions.records import EpisodeOutcome, VersionSource, VersionState
from tether.versions.rollback import RollbackCheckConfig, RollbackConfig

# The routed robot runs each task twice in a row and declares it: at a 50 % share every
# pair of episodes is one canary and one control episode of the same task.
EPISODES = 16


def _serving(
    tmp_path: Path, base: PolicyBundle, supervisor: Supervisor, config: VersionsConfig
) -> tuple[PolicyVersions, list[EpisodeOutcome], RunningServer]:
    """Version 1 (``base``) live and version 2 registered in ``PolicyVersions``, a server
    routed by them, and the list every finished episode's outcome is appended to."""
    versions = PolicyVersions(config, engine_factory=make_engine, shadow_supervisor=supervisor)
    versions.load(tmp_path / "base", make_live=True)
    versions.registry.register(
        make_engine(derived(base, tmp_path / "v2", 2, "v2", nudged)),
        source=VersionSource.LEARNER,
        make_live_if_first=False,
    )
    finished: list[EpisodeOutcome] = []
    on_episode = versions.on_episode

    def record(outcome: EpisodeOutcome) -> None:
        finished.append(outcome)
        on_episode(outcome)

    versions.on_episode = record  # type: ignore[method-assign]
    server_config = ServerConfig(
        port=0, metrics_port=None, admission=AdmissionConfig(rate_limit_hz=0)
    )
    server = build_server(tmp_path / "base", server_config, versions=versions)
    return versions, finished, RunningServer(server)


@pytest.mark.parametrize("tightening", [0.8, 1.0])
def test_canary_serves_whole_episodes_and_episode_outcomes_reach_the_registry(
    base_bundle: PolicyBundle,
    tmp_path: Path,
    spec: RobotSpec,
    supervisor: Supervisor,
    tightening: float,
) -> None:
    versions, finished, running = _serving(tmp_path, base_bundle, supervisor, VersionsConfig())
    live, candidate = versions.registry.get(1), versions.registry.get(2)
    versions.registry.transition(candidate.id, VersionState.SHADOW, "test: shadow passed")
    versions.registry.transition(candidate.id, VersionState.CANARY, "test: into the canary")
    versions.router.start_canary(candidate.id, fraction=0.5, tightening=tightening)
    obs = arm_observations(spec, 8, seed=2)
    try:
        with PolicyClient(running.address) as client:
            routed = client.session(spec, robot_id="canary-robot", control_deadline_s=5.0)
            pinned = client.session(
                spec, robot_id="baseline", control_deadline_s=5.0, pin_version=live.id
            )
            served: dict[str, list[int]] = {"routed": [], "pinned": []}
            for episode in range(EPISODES):
                for t in range(4):
                    done = t == 3
                    for name, session in (("routed", routed), ("pinned", pinned)):
                        reply = session.step(
                            obs[t],
                            reward=1.0,
                            truncated=done,
                            success=done and episode % 2 == 0,
                            deterministic=True,
                            task_id=f"task-{episode // 2}" if name == "routed" else "",
                            final_distance_m=0.05 if done else None,
                        )
                        assert reply.version is not None, reply.reason
                        served[name].append(reply.version.id)
            routed.close()
            pinned.close()
    finally:
        running.stop()
    episodes = [served["routed"][i : i + 4] for i in range(0, 4 * EPISODES, 4)]
    assert all(len(set(e)) == 1 for e in episodes)  # sticky per episode
    canary_episodes = sum(e[0] == candidate.id for e in episodes)
    for k in range(0, EPISODES, 2):  # each task: once by the canary, once by its control
        assert {episodes[k][0], episodes[k + 1][0]} == {candidate.id, live.id}
    assert canary_episodes == EPISODES // 2
    # The task id and the final distance travelled with the steps into the outcomes.
    # Both arms are marked as the experiment whatever the limits (the canary pairs on
    # that), and as tightened only when the limits were.
    routed_outcomes = [o for o in finished if o.experiment]
    assert len(routed_outcomes) == EPISODES
    assert all(o.tightened == (tightening < 1.0) for o in routed_outcomes)
    assert [o.task_id for o in routed_outcomes] == [f"task-{k // 2}" for k in range(EPISODES)]
    assert all(o.final_distance_m == np.float32(0.05) for o in routed_outcomes)
    assert {o.task_id for o in finished if not o.experiment} == {""}  # pinned: undeclared
    assert set(served["pinned"]) == {live.id}  # a pin beats the router
    canary = versions.registry.metrics(candidate.id)
    live_metrics = versions.registry.metrics(live.id)
    assert canary.episodes == canary_episodes
    assert live_metrics.episodes == EPISODES + (EPISODES - canary_episodes)  # pinned + routed
    # 3 rewarded actions per episode: the first step of an episode brings no reward.
    assert np.isclose(canary.mean_return, 3.0)
    assert np.isclose(live_metrics.mean_return, 3.0)
    assert 0.0 <= canary.success_rate <= 1.0
    assert np.isclose(live_metrics.success_rate, 0.5, atol=0.25)
    assert canary.steps == 4 * canary_episodes  # per-step feedback (on_step) too


def test_a_rollback_check_serves_the_last_known_good_through_the_control_stream(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    """The whole path: a drift that hurts both versions alike raises the monitor's alarm
    on the robot's own episodes, the server then serves the last-known-good beside live on
    the same tasks (the check's trial travels with every step into the outcomes), and the
    check keeps live."""
    config = VersionsConfig(
        rollback=RollbackConfig(
            window_episodes=10,
            min_episodes=4,
            sustain_episodes=2,
            check=RollbackCheckConfig(pairs=4, max_pairs=4, fraction=0.5),
        )
    )
    versions, finished, running = _serving(tmp_path, base_bundle, supervisor, config)
    first, second = versions.registry.get(1), versions.registry.get(2)
    obs = arm_observations(spec, 4, seed=3)
    served: list[int] = []
    try:
        with PolicyClient(running.address) as client:
            robot = client.session(spec, robot_id="robot", control_deadline_s=5.0)

            def episode(k: int, *, drifted: bool) -> None:
                for t in range(4):
                    done = t == 3
                    reply = robot.step(
                        obs[t],
                        reward=0.0,
                        truncated=done,
                        success=done and not drifted,
                        deterministic=True,
                        task_id=f"task-{(k // 2) % 5}",
                        final_distance_m=(0.2 if drifted else 0.02) if done else None,
                    )
                    assert reply.version is not None, reply.reason
                served.append(reply.version.id)

            for k in range(10):
                episode(k, drifted=False)
            versions.registry.promote(second.id, "test: gate passed")
            for k in range(10, 40):
                episode(k, drifted=True)
            robot.close()
    finally:
        running.stop()
    checks = versions.rollback.checks
    assert [(c.live, c.last_known_good, c.rolled_back) for c in checks] == [
        (second.id, first.id, False)
    ]
    live = versions.registry.live()
    assert live is not None
    assert live.id == second.id
    in_check = [o for o in finished if o.experiment]
    assert {o.trial for o in in_check} == {1}  # the check's number, on every arm
    assert {o.version for o in in_check} == {first.id, second.id}
    assert first.id in served[10:]  # the last-known-good acted again, in its share only
    assert all(o.version == second.id for o in finished[10:] if not o.experiment)
