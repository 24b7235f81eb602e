"""PPO inside the learner: version purity of every batch, following the live version,
and checkpoint/restart (in-process and with the learner process SIGKILLed)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from tether.data.channel import ChannelConfig, TransitionChannel
from tether.data.columns import TransitionArrays
from tether.learning.config import PPOConfig
from tether.learning.core import LearnerCore
from tether.learning.errors import CheckpointError
from tether.learning.learner import Learner
from tether.learning.learner_config import LearnerConfig
from tether.learning.ppo import PPOBatch, PPOStats, pre_squash
from tether.learning.process import LearnerEventKind, LearnerProcess
from tether.learning.publication import PublicationConfig
from tether.policy import PolicyBundle
from tether.policy.networks import Actor, gaussian_log_prob
from tether.policy.shared_weights import SharedWeights

from .conftest import loop_config, resolve_pending
from .test_process import wait_for

Traffic = Callable[..., TransitionArrays]
PPO_SMALL = PPOConfig(
    rollout_length=64, minibatch_size=16, epochs=2, kl_target=None, value_warmup_rollouts=0
)


def config(**overrides: object) -> LearnerConfig:
    return loop_config(**{"algorithm": "ppo", "ppo": PPO_SMALL, **overrides})


def stamped(
    traffic: Traffic, bundle: PolicyBundle, n: int, version: int, seed: int = 0
) -> TransitionArrays:
    """Fake traffic produced by ``version`` (actions inside the tanh's range)."""
    rows = traffic(bundle, n, seed=seed)
    rows.policy_versions[:] = version
    rows.actions[:] = np.clip(rows.actions, -0.95, 0.95)
    rows.proposed_actions[:] = rows.actions
    return rows


def spy_batches(core: LearnerCore) -> list[PPOBatch]:
    """Record every batch the PPO update is given (the update still runs)."""
    seen: list[PPOBatch] = []
    ppo = core._ppo
    assert ppo is not None
    real = ppo.update

    def update(batch: PPOBatch, *, train_actor: bool = True) -> PPOStats:
        seen.append(batch)
        return real(batch, train_actor=train_actor)

    ppo.update = update  # type: ignore[method-assign]
    return seen


def test_stale_version_transitions_never_enter_a_ppo_batch(
    small_bundle: PolicyBundle, traffic: Traffic
) -> None:
    core = LearnerCore(small_bundle, config())
    behaviour = {k: v.clone() for k, v in small_bundle.actor_state.items()}
    # The learner's actor has run ahead of the behaviour version (as after publications):
    # old log-probs must be the behaviour's, not the learner's.
    with torch.no_grad():
        for p in core.algorithm.actor.parameters():
            p.add_(0.05 * torch.randn_like(p))
    core.follow(7, behaviour)
    seen = spy_batches(core)
    rng = np.random.default_rng(0)
    rows = stamped(traffic, small_bundle, 400, version=7)
    rows.policy_versions[:] = rng.choice([6, 7, 8], size=400)  # canary, rollback, stale rows
    normalized = core.ingest(rows)
    on_policy = normalized.observations[rows.policy_versions == 7]
    ran = core.run_updates(1000)

    assert ran == len(seen) > 0
    reference = Actor(small_bundle.architecture)
    reference.load_state_dict(behaviour)
    for batch in seen:
        assert (batch.policy_versions == 7).all()
        # Each row is one of version 7's rows, not a relabelled stale one.
        gaps = np.abs(batch.observations[:, None, :] - on_policy[None, :, :]).max(axis=2)
        assert (gaps.min(axis=1) == 0).all()
        with torch.no_grad():
            mu, log_std = reference(torch.from_numpy(batch.observations))
            expected = gaussian_log_prob(pre_squash(torch.from_numpy(batch.actions)), mu, log_std)
        np.testing.assert_allclose(batch.old_log_probs, expected.numpy(), rtol=1e-5, atol=1e-5)
    assert core.rollouts is not None
    assert core.rollouts.dropped_other_version == int((rows.policy_versions != 7).sum())


def test_the_learner_trains_on_the_live_version_only_and_follows_a_promotion(
    small_bundle: PolicyBundle, traffic: Traffic
) -> None:
    arch = small_bundle.architecture
    v0 = small_bundle.version.id
    with (
        TransitionChannel(arch.obs_dim, arch.act_dim, ChannelConfig(capacity=4096)) as channel,
        SharedWeights.create(arch) as weights,
    ):
        learner = Learner(small_bundle, config(), channel=channel, weights=weights)
        channel.put_arrays(stamped(traffic, small_bundle, 64, version=v0 + 5))
        for _ in range(5):
            assert learner.step() == 0  # not the deployed version's data
        assert learner.counters().off_version_rows == 64
        channel.put_arrays(stamped(traffic, small_bundle, 64, version=v0, seed=1))
        ran = sum(learner.step() for _ in range(5))
        assert ran == 2 * 64 // 16  # epochs x mini-batches of one rollout
        published = weights.pending_version()
        assert published is not None
        resolve_pending(weights, promote=True)
        learner.step()
        assert learner.counters().deployed_version == published
        # The old version's rows are stale now; the candidate's are the new rollout.
        channel.put_arrays(stamped(traffic, small_bundle, 64, version=v0, seed=2))
        assert sum(learner.step() for _ in range(5)) == 0
        channel.put_arrays(stamped(traffic, small_bundle, 64, version=published, seed=3))
        assert sum(learner.step() for _ in range(5)) == 8


def test_a_restored_ppo_learner_continues_bit_identically(
    small_bundle: PolicyBundle, traffic: Traffic, tmp_path: Path
) -> None:
    arch = small_bundle.architecture
    v0 = small_bundle.version.id
    with (
        TransitionChannel(arch.obs_dim, arch.act_dim, ChannelConfig(capacity=4096)) as channel,
        SharedWeights.create(arch) as weights,
    ):
        first = Learner(
            small_bundle, config(), channel=channel, weights=weights, checkpoint_dir=tmp_path
        )
        channel.put_arrays(stamped(traffic, small_bundle, 128, version=v0))
        while first.step():
            pass
        first.checkpoint()
        second = Learner(
            small_bundle,
            config(),
            channel=channel,
            weights=weights,
            checkpoint_dir=tmp_path,
            resume=True,
        )
    a, b = first.core._ppo, second.core._ppo
    assert a is not None
    assert b is not None
    assert b.updates == a.updates == 16
    assert b.rollouts == a.rollouts == 2
    for name, module in a.modules().items():
        other = b.modules()[name].state_dict()
        for k, v in module.state_dict().items():
            assert torch.equal(v, other[k]), f"{name}.{k}"
    moments_a = a.optimizer.state_dict()["state"]
    moments_b = b.optimizer.state_dict()["state"]
    for i, slots in moments_a.items():
        for key, value in slots.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(moments_b[i][key]))
    assert second.counters().resumed_from_updates == 16


def test_a_sac_checkpoint_does_not_load_into_ppo(
    small_bundle: PolicyBundle, traffic: Traffic, tmp_path: Path
) -> None:
    arch = small_bundle.architecture
    with (
        TransitionChannel(arch.obs_dim, arch.act_dim, ChannelConfig(capacity=4096)) as channel,
        SharedWeights.create(arch) as weights,
    ):
        sac = Learner(
            small_bundle,
            config(algorithm="sac"),
            channel=channel,
            weights=weights,
            checkpoint_dir=tmp_path,
        )
        sac.checkpoint()
        with pytest.raises(CheckpointError, match=r"LearnerConfig\.algorithm"):
            Learner(
                small_bundle,
                config(),
                channel=channel,
                weights=weights,
                checkpoint_dir=tmp_path,
                resume=True,
            )


def test_a_sigkilled_ppo_learner_process_restarts_and_resumes(
    small_bundle: PolicyBundle, tmp_path: Path, traffic: Traffic
) -> None:
    arch = small_bundle.architecture
    v0 = small_bundle.version.id
    cfg = config(
        publication=PublicationConfig(min_interval_s=0.05, max_action_change=10.0, max_kl=1e3),
        checkpoint_interval_s=0.2,
        restart_backoff_s=0.1,
        torch_threads=1,
        nice=0,
    )
    assert small_bundle.path is not None
    with (
        TransitionChannel(arch.obs_dim, arch.act_dim, ChannelConfig(capacity=2048)) as channel,
        SharedWeights.create(arch) as weights,
    ):
        learner = LearnerProcess(
            small_bundle.path,
            cfg,
            weights=weights,
            channel=channel,
            checkpoint_dir=tmp_path / "ckpt",
            verdict_dir=tmp_path / "verdicts",
        )
        learner.start()
        try:
            channel.put_arrays(stamped(traffic, small_bundle, 256, version=v0))
            wait_for(
                lambda: (
                    learner.counters().checkpoints >= 1
                    and learner.counters().publications >= 1
                    and learner.counters().updates >= 8
                ),
                120,
                "updates, a checkpoint and a publication",
            )
            first_pid = learner.pid
            assert first_pid is not None
            os.kill(first_pid, signal.SIGKILL)
            wait_for(lambda: learner.counters().resumed_from_updates > 0, 120, "the resume")
            resumed_at = learner.counters().resumed_from_updates
            assert learner.pid != first_pid
            # The restarted learner still trains on the live version (the bundle's: the
            # candidate is pending) and on nothing else.
            channel.put_arrays(stamped(traffic, small_bundle, 64, version=v0 + 1000, seed=1))
            channel.put_arrays(stamped(traffic, small_bundle, 64, version=v0, seed=2))
            wait_for(lambda: learner.counters().updates > resumed_at, 60, "updates after resume")
            wait_for(lambda: learner.counters().off_version_rows >= 64, 30, "stale rows dropped")
            crashes = [e for e in learner.events() if e.kind is LearnerEventKind.CRASHED]
            assert [e.exitcode for e in crashes] == [-signal.SIGKILL]
        finally:
            learner.stop()


def test_ppo_proposes_between_rollouts(small_bundle: PolicyBundle, traffic: Traffic) -> None:
    """PPO's updates come one rollout at a time; a candidate can be due while the next
    rollout is still being collected."""
    arch = small_bundle.architecture
    v0 = small_bundle.version.id
    with (
        TransitionChannel(arch.obs_dim, arch.act_dim, ChannelConfig(capacity=4096)) as channel,
        SharedWeights.create(arch) as weights,
    ):
        learner = Learner(small_bundle, config(), channel=channel, weights=weights)
        channel.put_arrays(stamped(traffic, small_bundle, 64, version=v0))
        while learner.step():
            pass
        assert weights.pending_version() is not None
        resolve_pending(weights, promote=False)  # rejected: live stays v0
        assert weights.pending_version() is None
        learner.step()  # no new rollout, yet the learner's actor is proposed again
        assert weights.pending_version() is not None
        assert learner.counters().publications == 2
