"""A restored learner continues exactly where the checkpoint left it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tether.data.records import TransitionBatch
from tether.learning.checkpoint import (
    LearnerProgress,
    find_checkpoint,
    restore_checkpoint,
    save_checkpoint,
)
from tether.learning.config import SACConfig
from tether.learning.errors import CheckpointError
from tether.learning.sac import SAC
from tether.policy.networks import ActorArchitecture

ARCH = ActorArchitecture(obs_dim=4, act_dim=2, hidden_sizes=(16, 16))


def batch(seed: int) -> TransitionBatch:
    rng = np.random.default_rng(seed)
    n = 32
    return TransitionBatch(
        rng.standard_normal((n, 4), dtype=np.float32),
        rng.uniform(-1, 1, (n, 2)).astype(np.float32),
        rng.standard_normal(n).astype(np.float32),
        rng.standard_normal((n, 4), dtype=np.float32),
        np.zeros(n, dtype=bool),
        np.zeros(n, dtype=bool),
        np.zeros(n, dtype=np.int64),
        np.zeros(n, dtype=np.int64),
        np.zeros(n, dtype=np.int64),
        np.zeros(n, dtype=bool),
    )


def test_restore_continues_bit_identically(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    original = SAC(ARCH, SACConfig(seed=5))
    for i in range(5):
        original.update(batch(i))
    progress = LearnerProgress(
        updates=original.updates,
        next_version=8,
        deployed_version=7,
        transitions_ingested=160,
        publications=3,
    )
    deployed = original.actor_state()
    save_checkpoint(tmp_path / "ckpt", original, deployed=deployed, progress=progress)

    restored = SAC(ARCH, SACConfig(seed=99))
    got, got_deployed = restore_checkpoint(tmp_path / "ckpt", restored)
    assert got == progress
    assert restored.updates == original.updates
    for k, v in deployed.items():
        assert torch.equal(got_deployed[k], v)
    # Same sampling noise from here on, so any difference comes from restored state.
    original._generator.manual_seed(1)
    restored._generator.manual_seed(1)
    for i in range(5, 8):
        original.update(batch(i))
        restored.update(batch(i))
    for a, b in zip(original.critic.parameters(), restored.critic.parameters(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(original.actor.parameters(), restored.actor.parameters(), strict=True):
        assert torch.equal(a, b)
    assert original.alpha == restored.alpha


def test_missing_or_foreign_checkpoint_is_refused(tmp_path: Path) -> None:
    sac = SAC(ARCH)
    with pytest.raises(CheckpointError, match="no learner checkpoint"):
        restore_checkpoint(tmp_path / "none", sac)
    progress = LearnerProgress(0, 1, 0, 0, 0)
    save_checkpoint(tmp_path / "c", sac, deployed=sac.actor_state(), progress=progress)
    other = SAC(ActorArchitecture(obs_dim=4, act_dim=2, hidden_sizes=(8,)))
    with pytest.raises(CheckpointError, match="architecture"):
        restore_checkpoint(tmp_path / "c", other)


def test_an_interrupted_save_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    sac = SAC(ARCH)
    target = tmp_path / "c"
    save_checkpoint(
        target, sac, deployed=sac.actor_state(), progress=LearnerProgress(1, 1, 0, 0, 0)
    )
    # A crash between "move the old one aside" and "rename the new one in".
    target.rename(target.with_name("c.old"))
    (tmp_path / "c.tmp").mkdir()
    assert find_checkpoint(target) == tmp_path / "c.old"
    progress, _ = restore_checkpoint(target, SAC(ARCH))
    assert progress.updates == 1
