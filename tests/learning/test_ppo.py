"""PPO alone: GAE over rebuilt trajectories, the clipped step, and a tiny task it solves."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tether.data.columns import TransitionArrays
from tether.data.step import HUMAN_SOURCE_CODE
from tether.learning.config import PPOConfig
from tether.learning.ppo import PPO, PPOBatch, Rollouts, gae, successors
from tether.policy.networks import ActorArchitecture

PERIOD_NS = 20_000_000


def trajectory(
    n: int, *, start_ns: int, seed: int, terminated_last: bool = False
) -> TransitionArrays:
    """One robot's ``n`` consecutive transitions: each row's next observation and stamp
    are the following row's observation and stamp, as the recorder pairs them."""
    rng = np.random.default_rng(seed)
    states = rng.standard_normal((n + 1, 2)).astype(np.float32)
    rows = TransitionArrays.empty(n, 2, 1)
    rows.observations[:] = states[:-1]
    rows.next_observations[:] = states[1:]
    rows.rewards[:] = rng.standard_normal(n)
    rows.ingress_ns[:] = start_ns + PERIOD_NS * np.arange(n)
    rows.next_ingress_ns[:] = rows.ingress_ns + PERIOD_NS
    rows.terminated[-1] = terminated_last
    return rows


def reference_gae(rows: TransitionArrays, v: np.ndarray, v_next: np.ndarray) -> np.ndarray:
    """The textbook backward recursion over one ordered trajectory."""
    gamma, lam = 0.9, 0.8
    out = np.zeros(len(rows))
    running = 0.0
    for t in reversed(range(len(rows))):
        not_terminal = 0.0 if rows.terminated[t] else 1.0
        delta = rows.rewards[t] + gamma * not_terminal * v_next[t] - v[t]
        running = delta + gamma * lam * running
        out[t] = running
    return out


def test_gae_of_interleaved_shuffled_robots_equals_each_trajectory_alone() -> None:
    a = trajectory(30, start_ns=1_000, seed=1, terminated_last=True)
    b = trajectory(25, start_ns=1_007, seed=2)  # a second robot, stamps interleaved
    rng = np.random.default_rng(0)
    values = {id(t): (rng.standard_normal(len(t)), rng.standard_normal(len(t))) for t in (a, b)}
    mixed = TransitionArrays.concat([a, b])
    v = np.concatenate([values[id(a)][0], values[id(b)][0]])
    v_next = np.concatenate([values[id(a)][1], values[id(b)][1]])
    order = rng.permutation(len(mixed))
    shuffled = mixed.take(order)

    got = gae(shuffled, v[order], v_next[order], gamma=0.9, lam=0.8)

    expected = np.concatenate([reference_gae(a, *values[id(a)]), reference_gae(b, *values[id(b)])])
    np.testing.assert_allclose(got, expected[order], rtol=1e-5, atol=1e-5)


def test_a_row_is_never_chained_across_an_episode_end_or_to_another_observation() -> None:
    rows = trajectory(4, start_ns=0, seed=3)
    rows.truncated[1] = True  # the time limit: the next row starts a new episode
    rows.observations[3] += 1e-3  # same stamp, different observation: not its successor
    assert successors(rows).tolist() == [1, -1, -1, -1]


def test_rollouts_keep_only_the_followed_versions_policy_rows() -> None:
    rollouts = Rollouts(2, 1, rollout_length=6)
    rollouts.follow(4, {})
    rows = trajectory(12, start_ns=0, seed=4)
    rows.policy_versions[:] = [4, 3, 4, 5, 4, 4, 4, 3, 4, 4, 4, 4]
    rows.action_sources[2] = HUMAN_SOURCE_CODE  # a person's override
    rollouts.extend(rows)
    assert len(rollouts) == 8
    assert rollouts.dropped_other_version == 3
    assert rollouts.dropped_human == 1
    version, _, rollout = rollouts.take()
    assert version == 4
    assert rollout.ingress_ns.tolist() == (PERIOD_NS * np.array([0, 4, 5, 6, 8, 9])).tolist()
    assert len(rollouts) == 2  # the rest starts the next rollout of version 4
    rollouts.follow(5, {})  # a new deployed version: the partial rollout is dropped
    assert len(rollouts) == 0
    assert rollouts.dropped_partial == 2


def test_the_kl_early_stop_takes_no_step() -> None:
    arch = ActorArchitecture(obs_dim=2, act_dim=1, hidden_sizes=(8,))
    ppo = PPO(arch, PPOConfig(kl_target=1e-3, minibatch_size=4, rollout_length=4))
    before = ppo.actor_state()
    batch = PPOBatch(
        observations=np.zeros((4, 2), np.float32),
        actions=np.full((4, 1), 0.5, np.float32),
        old_log_probs=np.full(4, 5.0, np.float32),  # far from the learner's: KL is large
        advantages=np.ones(4, np.float32),
        returns=np.zeros(4, np.float32),
        policy_versions=np.zeros(4, np.int64),
    )
    stats = ppo.update(batch)
    assert stats.stopped
    assert stats.approx_kl > 1e-3
    assert ppo.updates == 0
    for k, v in ppo.actor_state().items():
        assert torch.equal(v, before[k])


class PointMass:
    """A 1-D point pushed by its action toward the origin: s' = s + 0.3 a, reward -|s'|,
    20-step episodes (truncated). Many independent copies step together."""

    def __init__(self, n: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.n = n
        self.state = self.rng.uniform(-1, 1, n).astype(np.float32)
        self.t = np.zeros(n, dtype=np.int64)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        nxt = np.clip(self.state + 0.3 * action, -2, 2).astype(np.float32)
        reward = -np.abs(nxt)
        self.t += 1
        truncated = self.t >= 20
        return nxt, reward.astype(np.float32), truncated


def final_distance(ppo: PPO, seed: int) -> float:
    env = PointMass(64, seed)
    for _ in range(20):
        with torch.no_grad():
            a = ppo.actor.sample(torch.from_numpy(env.state[:, None]), deterministic=True)[0]
        env.state, _, _ = env.step(a.numpy()[:, 0])
    return float(np.abs(env.state).mean())


def test_ppo_solves_a_tiny_reaching_task_within_a_bounded_number_of_updates() -> None:
    arch = ActorArchitecture(obs_dim=1, act_dim=1, hidden_sizes=(32, 32), activation="tanh")
    cfg = PPOConfig(
        rollout_length=512,
        minibatch_size=128,
        epochs=8,
        learning_rate=3e-3,
        gamma=0.9,
        value_warmup_rollouts=0,
        seed=1,
    )
    ppo = PPO(arch, cfg)
    before = final_distance(ppo, seed=99)
    rollouts = Rollouts(1, 1, cfg.rollout_length)
    env = PointMass(16, seed=0)
    generator = torch.Generator().manual_seed(0)
    clock = np.zeros(16, dtype=np.int64)  # per-robot ingress stamps, interleaved
    clock[:] = np.arange(16)
    for version in range(40):
        rollouts.follow(version, ppo.actor_state())
        while not rollouts.full():
            with torch.no_grad():
                a = ppo.actor.sample(torch.from_numpy(env.state[:, None]), generator=generator)[0]
            nxt, reward, truncated = env.step(a.numpy()[:, 0])
            rows = TransitionArrays.empty(env.n, 1, 1)
            rows.observations[:, 0] = env.state
            rows.actions[:] = a.numpy()
            rows.next_observations[:, 0] = nxt
            rows.rewards[:] = reward
            rows.truncated[:] = truncated
            rows.policy_versions[:] = version
            rows.ingress_ns[:] = clock
            rows.next_ingress_ns[:] = clock + 1_000
            clock += 1_000
            rollouts.extend(rows)
            env.state = nxt
            reset = np.flatnonzero(truncated)
            env.state[reset] = env.rng.uniform(-1, 1, len(reset))
            env.t[reset] = 0
        _, behaviour, data = rollouts.take()
        for _ in ppo.schedule(data, behaviour):
            pass
        if final_distance(ppo, seed=99) < 0.1:
            break
    after = final_distance(ppo, seed=99)
    assert before > 0.3  # the untrained actor does not reach the origin
    assert after < 0.1, f"mean final |s| {after:.3f} after {ppo.updates} updates"
    assert ppo.updates <= 40 * 8 * 4
    assert not math.isnan(after)


@pytest.mark.parametrize("freeze", [True, False])
def test_a_frozen_trunk_stays_bit_identical(freeze: bool) -> None:
    arch = ActorArchitecture(obs_dim=2, act_dim=1, hidden_sizes=(8,))
    ppo = PPO(arch, PPOConfig(freeze_trunk=freeze, kl_target=None, value_warmup_rollouts=0))
    trunk = {k: v.clone() for k, v in ppo.actor.trunk.state_dict().items()}
    rng = np.random.default_rng(0)
    batch = PPOBatch(
        observations=rng.standard_normal((16, 2)).astype(np.float32),
        actions=rng.uniform(-0.9, 0.9, (16, 1)).astype(np.float32),
        old_log_probs=np.zeros(16, np.float32),
        advantages=rng.standard_normal(16).astype(np.float32),
        returns=rng.standard_normal(16).astype(np.float32),
        policy_versions=np.zeros(16, np.int64),
    )
    for _ in range(3):
        ppo.update(batch)
    same = all(torch.equal(v, trunk[k]) for k, v in ppo.actor.trunk.state_dict().items())
    assert same is freeze
