"""Pretraining with PPO writes a bundle of the same format as SAC's, which both online
learners start from."""

from __future__ import annotations

from pathlib import Path

from tether.learning.config import PPOConfig, SACConfig
from tether.learning.core import LearnerCore
from tether.learning.learner_config import LearnerConfig
from tether.learning.pretrain import PretrainConfig, pretrain
from tether.policy import load_bundle
from tether.sim.spec import arm_spec

TINY = PretrainConfig(
    algorithm="ppo",
    ppo=PPOConfig(hidden_sizes=(16, 16), rollout_length=64, minibatch_size=32, epochs=2),
    sac=SACConfig(batch_size=32),
    command_interface="position",
    total_env_steps=256,
    n_envs=2,
    eval_interval_steps=128,
    eval_episodes=1,
    final_eval_episodes=1,
    demonstration_episodes=2,
    bc_updates=20,
)


def test_ppo_pretraining_writes_a_position_bundle_of_the_same_format(tmp_path: Path) -> None:
    result = pretrain(TINY, tmp_path / "b")
    # The clone is evaluated before PPO's first rollout, then every 128 steps.
    assert [p.env_steps for p in result.history] == [0, 128, 256]
    assert result.env_steps == 256
    # 4 rollouts of 64; the first only fits the value network (value_warmup_rollouts=1).
    assert 0 < result.updates <= 4 * 2 * 2
    bundle = load_bundle(tmp_path / "b")
    assert bundle.architecture.kind == "mlp_gaussian"
    assert bundle.architecture.hidden_sizes == (16, 16)
    assert bundle.robot_spec == arm_spec("position")
    assert bundle.manifest.action.frame is not None
    assert bundle.training is None  # SAC's critics only; PPO's value is not stored
    meta = bundle.manifest.metadata
    assert meta.algorithm == "ppo"
    assert "PPO: rollouts of 64" in meta.source
    assert bundle.version.name == "pretrained-arm-position-ppo-seed0"
    for algorithm in ("ppo", "sac"):
        core = LearnerCore(bundle, LearnerConfig(algorithm=algorithm))  # type: ignore[arg-type]
        assert core.algorithm.name == algorithm
