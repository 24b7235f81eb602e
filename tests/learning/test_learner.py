"""The learner loop in-process: streaming updates, degradation levels, normalization."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from tests.learning.conftest import loop_config
from tether.data.channel import ChannelConfig, TransitionChannel
from tether.data.columns import TransitionArrays
from tether.data.step import ACTION_SOURCES
from tether.learning.learner import Learner
from tether.learning.learner_config import LearnerConfig
from tether.policy import PolicyBundle
from tether.policy.shared_weights import SharedWeights
from tether.safety.levels import DegradationLevel

Traffic = Callable[..., TransitionArrays]


config = loop_config


def make(
    bundle: PolicyBundle, cfg: LearnerConfig, tmp: Path | None = None
) -> tuple[Learner, TransitionChannel, SharedWeights]:
    arch = bundle.architecture
    channel = TransitionChannel(arch.obs_dim, arch.act_dim, ChannelConfig(capacity=4096))
    weights = SharedWeights.create(arch)
    return (
        Learner(bundle, cfg, channel=channel, weights=weights, checkpoint_dir=tmp),
        channel,
        weights,
    )


def test_updates_start_once_a_mini_batch_is_buffered_and_follow_the_ratio(
    small_bundle: PolicyBundle, traffic: Traffic
) -> None:
    learner, channel, weights = make(small_bundle, config(updates_per_transition=0.5))
    try:
        channel.put_arrays(traffic(small_bundle, 31))
        assert learner.step() == 0  # 31 < batch size: nothing to learn from yet
        channel.put_arrays(traffic(small_bundle, 33, seed=1))
        ran = sum(learner.step() for _ in range(10))
        assert ran == 32  # 64 transitions x 0.5 updates per transition
        counters = learner.counters()
        assert counters.updates == 32
        assert counters.transitions == 64
        assert counters.publications >= 1
        snap = weights.read()
        assert snap is not None
        # Lineage: each publication's parent is the one before; the first's is the bundle.
        assert snap.version == small_bundle.version.id + counters.publications
        assert snap.parent == snap.version - 1
    finally:
        channel.close()
        weights.close()


def test_restricted_trains_without_publishing_and_paused_stops(
    small_bundle: PolicyBundle, traffic: Traffic
) -> None:
    learner, channel, weights = make(small_bundle, config(updates_per_transition=1.0))
    try:
        weights.set_degradation_level(DegradationLevel.RESTRICTED)
        channel.put_arrays(traffic(small_bundle, 64))
        while learner.step():
            pass
        c = learner.counters()
        assert c.updates == 64
        assert c.publications == 0
        assert c.skipped_restricted >= 1
        assert weights.latest_version() is None

        weights.set_degradation_level(DegradationLevel.PAUSED)
        channel.put_arrays(traffic(small_bundle, 64, seed=2))
        for _ in range(5):
            assert learner.step() == 0
        assert learner.counters().updates == 64
        assert learner.counters().transitions == 128  # still drained: nothing lost

        weights.set_degradation_level(DegradationLevel.NORMAL)
        while learner.step():
            pass
        assert learner.counters().updates == 128
        assert learner.counters().publications >= 1
        assert weights.latest_version() == small_bundle.version.id + learner.counters().publications
    finally:
        channel.close()
        weights.close()


def test_learner_trains_on_the_bundle_normalized_observations(
    small_bundle: PolicyBundle, traffic: Traffic
) -> None:
    learner, channel, weights = make(small_bundle, config())
    try:
        rows = traffic(small_bundle, 40)
        learner.ingest(rows)
        norm = small_bundle.manifest.normalizer
        expected = np.clip(
            (rows.observations - np.asarray(norm.mean))
            / np.sqrt(np.asarray(norm.var) + norm.epsilon),
            -norm.clip,
            norm.clip,
        )
        batch = learner.replay.sample(64)
        # Every sampled row is the normalized form of one ingested row.
        gaps = np.abs(batch.observations[:, None, :] - expected[None, :, :]).max(axis=2)
        assert np.all(gaps.min(axis=1) < 1e-5)
        assert np.abs(batch.observations).max() <= norm.clip
    finally:
        channel.close()
        weights.close()


def test_fine_tuning_starts_from_the_bundle_critics_and_freezes_the_trunk(
    small_bundle: PolicyBundle, traffic: Traffic
) -> None:
    learner, channel, weights = make(
        small_bundle, config(fine_tune=True, updates_per_transition=1.0)
    )
    try:
        assert small_bundle.training is not None
        for k, v in small_bundle.training.critic.items():
            assert torch.equal(learner.sac.twin_critic_states()[0][k], v)
        trunk = {k: v.clone() for k, v in learner.sac.actor.trunk.state_dict().items()}
        channel.put_arrays(traffic(small_bundle, 64))
        while learner.step():
            pass
        assert learner.counters().updates == 64
        for k, v in learner.sac.actor.trunk.state_dict().items():
            assert torch.equal(v, trunk[k])
        assert learner.sac.actor_optimizer.param_groups[0]["lr"] == 3e-4 * 0.2
    finally:
        channel.close()
        weights.close()


def test_a_restarted_learner_continues_the_published_lineage(
    small_bundle: PolicyBundle, traffic: Traffic
) -> None:
    """Publications made after the last checkpoint keep their ids: the learner builds on
    the one the server made live."""
    arch = small_bundle.architecture
    channel = TransitionChannel(arch.obs_dim, arch.act_dim, ChannelConfig(capacity=4096))
    weights = SharedWeights.create(arch)
    try:
        live = {k: v + 0.01 for k, v in small_bundle.actor_state.items()}
        weights.publish(50, live, parent=49)
        weights.set_live_version(50)
        weights.set_resolved_version(50)
        learner = Learner(small_bundle, config(), channel=channel, weights=weights)
        assert learner.progress.deployed_version == 50
        for k, v in live.items():
            assert torch.equal(learner.deployed[k], v)
        channel.put_arrays(traffic(small_bundle, 64))
        while learner.counters().publications == 0:
            learner.step()
        snap = weights.read()
        assert snap is not None
        assert (snap.version, snap.parent) == (51, 50)
    finally:
        channel.close()
        weights.close()


def test_learner_learns_from_proposed_actions_except_human_overrides(
    small_bundle: PolicyBundle, traffic: Traffic
) -> None:
    """The supervisor is part of the environment; a person's override is a demonstration."""
    learner, channel, weights = make(small_bundle, config())
    rows = traffic(small_bundle, 3)
    rows.proposed_actions[:] = 0.5
    rows.actions[:] = -0.25
    rows.action_sources[:] = [
        ACTION_SOURCES.index("clipped"),
        ACTION_SOURCES.index("backup"),
        ACTION_SOURCES.index("human"),
    ]
    learner.ingest(rows)
    learned = learner.replay.state_dict()["storage.rows.actions"]
    np.testing.assert_array_equal(learned[:3, 0], np.float32([0.5, 0.5, -0.25]))
    channel.close()
    weights.close()
