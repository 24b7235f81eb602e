"""Shared fixtures of the learning tests: a small arm bundle with critics, and fake traffic."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from tether.data.columns import TransitionArrays
from tether.learning.config import SACConfig
from tether.learning.learner_config import LearnerConfig
from tether.learning.publication import PublicationConfig
from tether.policy import PolicyBundle, init_bundle
from tether.policy.shared_weights import SharedWeights
from tether.sim.spec import arm_spec
from tether.versions.learner_gate import LearnerGateConfig
from tether.versions.stages.offline import OfflineStageConfig
from tether.versions.stages.simulation import SimulationStageConfig


@pytest.fixture(autouse=True)
def _one_torch_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture
def small_bundle(tmp_path: Path) -> PolicyBundle:
    return init_bundle(tmp_path / "bundle", arm_spec(), hidden_sizes=(16, 16), with_training=True)


Traffic = Callable[..., TransitionArrays]


@pytest.fixture
def traffic() -> Traffic:
    """``traffic(bundle, n, seed=0)``: fake arm transitions (see :func:`make_traffic`)."""
    return make_traffic


def make_traffic(bundle: PolicyBundle, n: int, seed: int = 0) -> TransitionArrays:
    """``n`` transitions of raw (unnormalized) arm observations and random actions."""
    arch = bundle.architecture
    rows = TransitionArrays.empty(n, arch.obs_dim, arch.act_dim)
    rng = np.random.default_rng(seed)
    norm = bundle.manifest.normalizer
    mean, std = np.asarray(norm.mean), np.sqrt(np.asarray(norm.var))
    rows.observations[:] = mean + std * rng.standard_normal((n, arch.obs_dim))
    rows.next_observations[:] = rows.observations + 0.01 * std * rng.standard_normal(
        (n, arch.obs_dim)
    )
    rows.actions[:] = rng.uniform(-1, 1, (n, arch.act_dim))
    rows.proposed_actions[:] = rows.actions
    rows.rewards[:] = -np.linalg.norm(rows.actions, axis=1)
    return rows


def resolve_pending(weights: SharedWeights, *, promote: bool) -> int:
    """Do what the server does when it has judged the pending candidate: mark its version
    resolved and, when promoted, live. Returns that version."""
    pending = weights.pending_version()
    assert pending is not None, "no candidate is pending"
    if promote:
        weights.set_live_version(pending)
    weights.set_resolved_version(pending)
    return pending


def loop_config(**overrides: object) -> LearnerConfig:
    """A learner config for tests of the loop, not of the gate
    (tests/learning/test_gated_publication.py): SAC on small batches, every publication
    admitted, the simulation stage off; ``overrides`` replace whole fields."""
    base: dict[str, object] = dict(
        algorithm="sac",
        sac=SACConfig(batch_size=32),
        publication=PublicationConfig(min_interval_s=0.0, max_action_change=10.0, max_kl=1e3),
        fine_tune=False,
        idle_poll_s=0.001,
        gate=LearnerGateConfig(
            offline=OfflineStageConfig(min_observations=1, max_action_change=10.0, max_kl=1e3),
            simulation=SimulationStageConfig(enabled=False),
        ),
    )
    base.update(overrides)
    return LearnerConfig.model_validate(base)
