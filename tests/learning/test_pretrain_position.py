"""Pretraining for the position-commanded arm: a behaviour-cloned start from the scripted
controller, then SAC; the bundle says how it was made and is for the position arm only."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.learning.config import SACConfig
from tether.learning.errors import LearningError
from tether.learning.pretrain import PretrainConfig, pretrain
from tether.policy import load_bundle
from tether.sim.spec import arm_spec

TINY = PretrainConfig(
    sac=SACConfig(hidden_sizes=(16, 16), batch_size=32, bc_weight=2.5),
    command_interface="position",
    total_env_steps=200,
    n_envs=2,
    eval_interval_steps=100,
    eval_episodes=1,
    final_eval_episodes=1,
    demonstration_episodes=2,
    bc_updates=20,
    dagger_rounds=1,
    critic_warmup_updates=5,
)


def test_position_pretraining_starts_from_the_clone_and_writes_a_position_bundle(
    tmp_path: Path,
) -> None:
    seen: list[int] = []
    result = pretrain(TINY, tmp_path / "b", on_progress=lambda steps, _: seen.append(steps))
    # The clone is evaluated before SAC takes a step, then every 100 steps.
    assert [p.env_steps for p in result.history] == [0, 100, 200]
    assert seen[0] == 0
    # Demonstrations fill the buffer, so SAC updates from its first step (0.5 per step),
    # after the critic-only warm-up (5).
    assert result.updates == 5 + 100
    bundle = load_bundle(tmp_path / "b")
    assert bundle.robot_spec == arm_spec("position")
    assert bundle.robot_spec.fingerprint() != arm_spec("torque").fingerprint()
    assert bundle.training is not None
    source = bundle.manifest.metadata.source
    assert "position interface" in source
    assert "behaviour-cloned warm start from 2 episodes" in source
    assert "1 DAgger rounds" in source


def test_position_pretraining_refuses_a_torque_arm(tmp_path: Path) -> None:
    with pytest.raises(LearningError, match="needs command_interface='position'"):
        pretrain(TINY.model_copy(update={"command_interface": "torque"}), tmp_path / "t")


def test_a_supervisor_comes_in_through_the_hook(tmp_path: Path) -> None:
    """The hook for pretraining with the position supervisor in the loop: whatever the
    factory makes filters every action (here a stand-in that passes actions through)."""
    made: list[object] = []

    class PassThrough:
        def filter(self, obs, action, previous):  # type: ignore[no-untyped-def]
            made.append(self)
            verdict = type("Verdict", (), {"correction_norm": 0.0})()
            return action, verdict

    config = TINY.model_copy(update={"supervised": True, "total_env_steps": 20})
    pretrain(config, tmp_path / "h", supervisor_factory=PassThrough)  # type: ignore[arg-type]
    assert made


def test_the_position_bundle_steps_from_the_command_and_the_learner_learns_its_steps(
    tmp_path: Path,
) -> None:
    """The bundle declares its action frame, inside the supervisor's rate limits, and
    LearnerCore maps the absolute commands robots record back to the actor's outputs."""
    import numpy as np

    from tether.data.columns import TransitionArrays
    from tether.learning.core import LearnerCore
    from tether.learning.learner_config import LearnerConfig
    from tether.policy import EngineConfig, PolicyEngine
    from tether.sim import ArmEnv, ArmEnvConfig

    pretrain(TINY, tmp_path / "b")
    bundle = load_bundle(tmp_path / "b")
    frame = bundle.manifest.action.frame
    spec = arm_spec("position")
    assert frame is not None
    dt = spec.control_period_s
    for step, limit in zip(frame.velocity_step_rad, spec.joint_velocity_limit_rad_s, strict=True):
        assert step < limit * dt
    for step, limit in zip(
        frame.acceleration_step_rad, spec.joint_acceleration_limit_rad_s2, strict=True
    ):
        assert step < limit * dt * dt
    # Served actions, recorded as a robot records them (absolute), come back as outputs.
    engine = PolicyEngine(bundle, EngineConfig(execution="eager", seed=1))
    env = ArmEnv(seed=0, config=ArmEnvConfig(command_interface="position"))
    obs, _ = env.reset(seed=0)
    rows = TransitionArrays.empty(8, spec.obs_dim, spec.act_dim)
    outputs = []
    for i in range(8):
        served = engine.act(obs[None, :], True).actions
        outputs.append(frame.outputs(obs[None, :], served)[0])
        rows.observations[i] = obs
        rows.actions[i] = rows.proposed_actions[i] = served[0]
        obs, *_ = env.step(served[0])
        rows.next_observations[i] = obs
    core = LearnerCore(bundle, LearnerConfig(algorithm="sac"))
    stored = core.ingest(rows)
    np.testing.assert_allclose(stored.actions, np.stack(outputs), atol=1e-6)
    assert not np.allclose(stored.actions, rows.actions, atol=1e-3)
