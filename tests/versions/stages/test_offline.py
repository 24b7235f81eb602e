"""The offline stage on real bundles: finite outputs, trust region, critic value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.versions.builders import (
    arm_observations,
    derived,
    make_engine,
    measure,
    negated,
    nudged,
)
from tether.policy.bundle import PolicyBundle
from tether.policy.networks import TwinCritic
from tether.spec import RobotSpec
from tether.versions.records import GateStage
from tether.versions.stages.offline import OfflineStageConfig, offline_stage


def test_offline_rejects_negated_actions_and_passes_a_small_step(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec
) -> None:
    obs = arm_observations(spec, 128, seed=0)
    cfg = OfflineStageConfig()
    bad = derived(base_bundle, tmp_path / "bad", 2, "negated", negated)
    small = derived(base_bundle, tmp_path / "small", 3, "nudged", nudged)
    bad_v = offline_stage(bad, base_bundle, obs, cfg)
    small_v = offline_stage(small, base_bundle, obs, cfg)
    assert bad_v.stage is GateStage.OFFLINE
    assert not bad_v.passed
    assert measure(bad_v, "action_change_rms") > cfg.max_action_change
    assert small_v.passed
    assert measure(small_v, "non_finite_outputs") == 0.0
    # Too few observations to judge is a failure, not a pass.
    assert not offline_stage(small, base_bundle, obs[:3], cfg).passed


def _critic_preferring(direction: np.ndarray, arch: object) -> TwinCritic:
    """A critic whose value is ``direction · a``, exactly (ReLU pairs carry ``±a``)."""
    critic = TwinCritic(arch)  # type: ignore[arg-type]
    obs_dim, act_dim = arch.obs_dim, arch.act_dim  # type: ignore[attr-defined]
    with torch.no_grad():
        for q in (critic.q1, critic.q2):
            first, second = q.body[0], q.body[2]
            first.weight.zero_()
            first.bias.zero_()
            for j in range(act_dim):
                first.weight[j, obs_dim + j] = 1.0
                first.weight[act_dim + j, obs_dim + j] = -1.0
            second.weight.copy_(torch.eye(second.weight.shape[0]))
            second.bias.zero_()
            q.out.weight.zero_()
            q.out.bias.zero_()
            q.out.weight[0, :act_dim] = torch.tensor(direction, dtype=torch.float32)
            q.out.weight[0, act_dim : 2 * act_dim] = -torch.tensor(direction, dtype=torch.float32)
    return critic


def test_offline_value_criterion_fails_when_the_critic_prefers_live(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec
) -> None:
    obs = arm_observations(spec, 128, seed=1)
    live_actions = make_engine(base_bundle).act(obs, deterministic=True).actions
    critic = _critic_preferring(np.sign(live_actions.mean(0)), base_bundle.architecture)
    # A wide trust region isolates the value criterion.
    cfg = OfflineStageConfig(max_action_change=10.0, max_kl=1e6, value_margin=0.0)
    bad = derived(base_bundle, tmp_path / "bad", 2, "negated", negated)
    verdict = offline_stage(bad, base_bundle, obs, cfg, critic=critic)
    assert measure(verdict, "critic_value_diff") < 0.0
    assert not verdict.passed
    same = offline_stage(base_bundle, base_bundle, obs, cfg, critic=critic)
    assert measure(same, "critic_value_diff") == pytest.approx(0.0)
    assert same.passed
