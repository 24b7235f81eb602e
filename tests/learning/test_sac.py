"""SAC learns a tiny task, respects a frozen trunk, and keeps its interface narrow."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tether.data.records import TransitionBatch
from tether.learning.config import SACConfig
from tether.learning.sac import SAC
from tether.policy.networks import ActorArchitecture


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def make_batch(
    obs: np.ndarray, act: np.ndarray, rew: np.ndarray, nxt: np.ndarray
) -> TransitionBatch:
    n = len(rew)
    return TransitionBatch(
        observations=obs.astype(np.float32),
        actions=act.astype(np.float32),
        rewards=rew.astype(np.float32),
        next_observations=nxt.astype(np.float32),
        terminated=np.zeros(n, dtype=bool),
        truncated=np.zeros(n, dtype=bool),
        policy_versions=np.zeros(n, dtype=np.int64),
        ingress_ns=np.zeros(n, dtype=np.int64),
        safety_checks=np.zeros(n, dtype=np.int64),
        human=np.zeros(n, dtype=bool),
    )


def point_step(x: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A 1-D point: moves by 0.2 * action; reward is minus the distance to the origin."""
    nxt = np.clip(x + 0.2 * a, -1.0, 1.0)
    return nxt, -np.abs(nxt[:, 0])


def test_sac_solves_one_dimensional_reaching_within_bounded_updates() -> None:
    arch = ActorArchitecture(obs_dim=1, act_dim=1, hidden_sizes=(32, 32))
    sac = SAC(arch, SACConfig(batch_size=128, gamma=0.9, actor_lr=1e-3, critic_lr=1e-3, seed=3))
    rng = np.random.default_rng(0)
    # Uniform exploration data covers the whole state-action space: an off-policy learner
    # must extract the optimal "move toward 0" policy from it.
    obs = rng.uniform(-1, 1, (4096, 1))
    act = rng.uniform(-1, 1, (4096, 1))
    nxt, rew = point_step(obs, act)
    for _ in range(1500):
        idx = rng.integers(0, len(rew), 128)
        sac.update(make_batch(obs[idx], act[idx], rew[idx], nxt[idx]))

    x = np.linspace(-1, 1, 41).reshape(-1, 1)
    for _ in range(10):
        x, _ = point_step(x, sac.act(x, deterministic=True))
    assert np.max(np.abs(x)) < 0.1


def _random_batch(rng: np.random.Generator, arch: ActorArchitecture, n: int) -> TransitionBatch:
    return make_batch(
        rng.standard_normal((n, arch.obs_dim)),
        rng.uniform(-1, 1, (n, arch.act_dim)),
        rng.standard_normal(n),
        rng.standard_normal((n, arch.obs_dim)),
    )


def test_frozen_trunk_stays_bit_identical_while_head_and_critics_learn() -> None:
    arch = ActorArchitecture(obs_dim=4, act_dim=2, hidden_sizes=(16, 16))
    sac = SAC(arch, SACConfig().fine_tuning())
    trunk = {k: v.clone() for k, v in sac.actor.trunk.state_dict().items()}
    head = {k: v.clone() for k, v in sac.actor.head.state_dict().items()}
    critic = {k: v.clone() for k, v in sac.critic.state_dict().items()}
    rng = np.random.default_rng(1)
    for _ in range(20):
        sac.update(_random_batch(rng, arch, 64))
    for k, v in sac.actor.trunk.state_dict().items():
        assert torch.equal(v, trunk[k]), k
    assert any(not torch.equal(v, head[k]) for k, v in sac.actor.head.state_dict().items())
    assert any(not torch.equal(v, critic[k]) for k, v in sac.critic.state_dict().items())
    assert sac.actor_optimizer.param_groups[0]["lr"] == pytest.approx(3e-4 * 0.2)


def test_without_freezing_the_trunk_moves() -> None:
    """The frozen-trunk test can fail: the same updates change an unfrozen trunk."""
    arch = ActorArchitecture(obs_dim=4, act_dim=2, hidden_sizes=(16, 16))
    sac = SAC(arch, SACConfig())
    trunk = {k: v.clone() for k, v in sac.actor.trunk.state_dict().items()}
    rng = np.random.default_rng(1)
    for _ in range(5):
        sac.update(_random_batch(rng, arch, 64))
    assert any(not torch.equal(v, trunk[k]) for k, v in sac.actor.trunk.state_dict().items())


def test_target_critics_follow_by_polyak_tau() -> None:
    arch = ActorArchitecture(obs_dim=3, act_dim=1, hidden_sizes=(8,))
    sac = SAC(arch, SACConfig(tau=0.25))
    before = [p.clone() for p in sac.critic_target.parameters()]
    sac.update(_random_batch(np.random.default_rng(2), arch, 32))
    for old, target, online in zip(
        before, sac.critic_target.parameters(), sac.critic.parameters(), strict=True
    ):
        torch.testing.assert_close(target, old + 0.25 * (online - old))


def test_entropy_coefficient_falls_when_entropy_exceeds_target() -> None:
    arch = ActorArchitecture(obs_dim=3, act_dim=2, hidden_sizes=(16,))
    sac = SAC(arch, SACConfig(alpha_lr=1e-2, target_entropy=-10.0))
    rng = np.random.default_rng(4)
    stats = [sac.update(_random_batch(rng, arch, 64)) for _ in range(30)]
    assert stats[-1].alpha < 1.0
    assert stats[-1].updates == 30
    assert all(math.isfinite(s.critic_loss) for s in stats)


def test_actor_state_round_trips_and_is_a_copy() -> None:
    arch = ActorArchitecture(obs_dim=3, act_dim=2, hidden_sizes=(8,))
    a, b = SAC(arch, SACConfig(seed=1)), SAC(arch, SACConfig(seed=2))
    state = a.actor_state()
    b.load_actor_state(state)
    obs = np.ones((2, 3), dtype=np.float32)
    np.testing.assert_array_equal(a.act(obs, deterministic=True), b.act(obs, deterministic=True))
    with torch.no_grad():
        next(iter(state.values())).add_(1.0)
    np.testing.assert_array_equal(a.act(obs, deterministic=True), b.act(obs, deterministic=True))


def test_config_refuses_bad_values() -> None:
    with pytest.raises(ValueError, match="hidden_sizes"):
        SACConfig(hidden_sizes=(256, 0))
    with pytest.raises(ValueError, match="extra"):
        SACConfig(learning_rate=1.0)  # type: ignore[call-arg]
