"""The fine-tuning recipe options: warm-up, critic ensemble, prior-data share, checkpoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.learning.conftest import Traffic
from tests.learning.test_checkpoint import ARCH, batch
from tether.learning.checkpoint import LearnerProgress, restore_checkpoint, save_checkpoint
from tether.learning.config import SACConfig
from tether.learning.core import LearnerCore
from tether.learning.critics import CriticEnsemble
from tether.learning.errors import CheckpointError, LearningError
from tether.learning.learner_config import LearnerConfig
from tether.learning.prior import PriorDataConfig
from tether.learning.sac import SAC, sac_from_bundle
from tether.policy import PolicyBundle
from tether.policy.networks import TwinCritic


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_the_warm_up_trains_the_critics_and_leaves_the_actor_and_alpha_alone() -> None:
    sac = SAC(ARCH, SACConfig(actor_warmup_updates=4, seed=1))
    actor, critic, alpha = _state(sac.actor), _state(sac.critic), sac.alpha
    for i in range(4):
        stats = sac.update(batch(i))
        assert np.isnan(stats.actor_loss)
    assert all(torch.equal(v, actor[k]) for k, v in sac.actor.state_dict().items())
    assert sac.alpha == alpha
    assert any(not torch.equal(v, critic[k]) for k, v in sac.critic.state_dict().items())
    sac.update(batch(4))  # the first update after the warm-up moves the actor
    assert any(not torch.equal(v, actor[k]) for k, v in sac.actor.state_dict().items())


def test_a_two_member_ensemble_starts_as_the_bundles_twin_critics(
    small_bundle: PolicyBundle,
) -> None:
    assert small_bundle.training is not None
    twin = TwinCritic(small_bundle.architecture)
    twin.load_state_dict(dict(small_bundle.training.critic))
    sac = sac_from_bundle(small_bundle, SACConfig())
    arch = small_bundle.architecture
    obs, act = torch.randn(8, arch.obs_dim), torch.rand(8, arch.act_dim) * 2 - 1
    q1, q2 = twin(obs, act)
    q = sac.critic(obs, act)
    assert torch.equal(q[0], q1)
    assert torch.equal(q[1], q2)
    assert sac.twin_critic_states()[0].keys() == dict(small_bundle.training.critic).keys()


def test_extra_members_start_near_the_bundles_critics_but_not_equal(
    small_bundle: PolicyBundle,
) -> None:
    sac = sac_from_bundle(small_bundle, SACConfig(critic_ensemble_size=5))
    arch = small_bundle.architecture
    obs, act = torch.randn(64, arch.obs_dim), torch.rand(64, arch.act_dim) * 2 - 1
    with torch.no_grad():
        q = sac.critic(obs, act)
        target = sac.critic_target(obs, act)
    for i in (2, 4):  # from q1, perturbed
        assert not torch.equal(q[i], q[0])
        assert float((q[i] - q[0]).abs().mean()) < float(q[0].abs().mean()) + 1.0
    assert not torch.equal(q[3], q[1])
    # The bundle's target critics equal its critics here, and each member's target
    # starts from the same perturbation as the member.
    assert torch.equal(target, q)
    with pytest.raises(LearningError, match="twin critics"):
        sac.twin_critic_states()


def test_the_target_is_the_minimum_over_a_random_subset_and_the_actor_follows_the_mean() -> None:
    ensemble = CriticEnsemble(ARCH, size=6)
    obs, act = torch.randn(16, 4), torch.rand(16, 2) * 2 - 1
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        q = ensemble(obs, act)
        assert torch.equal(ensemble.target_min(obs, act, 6, generator), q.min(dim=0).values)
        seen = set()
        for _ in range(30):
            got = ensemble.target_min(obs, act, 2, generator)
            pairs = [
                (i, j)
                for i in range(6)
                for j in range(i + 1, 6)
                if torch.equal(got, torch.minimum(q[i], q[j]))
            ]
            assert pairs, "the target is not the minimum of any two members"
            seen.add(pairs[0])
        assert len(seen) > 3, "the subset is not drawn at random"
        assert torch.equal(ensemble.actor_value(obs, act), q.mean(dim=0))
        pair = CriticEnsemble(ARCH, size=2)
        assert torch.equal(pair.actor_value(obs, act), pair(obs, act).min(dim=0).values)


def test_the_subset_cannot_exceed_the_ensemble() -> None:
    with pytest.raises(ValueError, match="critic_target_subset"):
        SACConfig(critic_ensemble_size=2, critic_target_subset=3)


def test_the_gate_reads_the_ensemble_minimum() -> None:
    sac = SAC(ARCH, SACConfig(critic_ensemble_size=4, critic_layer_norm=True))
    obs, act = torch.randn(8, 4), torch.rand(8, 2) * 2 - 1
    with torch.no_grad():
        a, b = sac.gate_critic()(obs, act)
        assert torch.equal(a, sac.critic(obs, act).min(dim=0).values)
        assert torch.equal(a, b)


def test_each_batch_holds_exactly_the_prior_share(
    small_bundle: PolicyBundle, traffic: Traffic
) -> None:
    config = LearnerConfig(algorithm="sac", prior=PriorDataConfig(episodes=1, fraction=0.5))
    core = LearnerCore(small_bundle, config)
    assert core.prior is not None
    assert len(core.prior) == 200
    core.prior.rows.rewards[:] = 1e6  # mark the prior rows
    core.ingest(traffic(small_bundle, 300))
    batch_size = config.sac.batch_size
    for _ in range(5):
        got = core.sample()
        assert len(got) == batch_size
        assert int((got.rewards == 1e6).sum()) == batch_size // 2
    assert core.prior.rows_in(255) == 128
    assert core.prior.rows_in(1) == 0


def test_without_prior_data_every_row_is_the_robots(
    small_bundle: PolicyBundle, traffic: Traffic
) -> None:
    core = LearnerCore(small_bundle, LearnerConfig(algorithm="sac"))
    assert core.prior is None
    core.ingest(traffic(small_bundle, 300))
    assert len(core.sample()) == LearnerConfig().sac.batch_size


def test_updates_follow_the_update_to_data_ratio(
    small_bundle: PolicyBundle, traffic: Traffic
) -> None:
    core = LearnerCore(small_bundle, LearnerConfig(algorithm="sac", updates_per_transition=3.0))
    core.ingest(traffic(small_bundle, 256))
    assert core.run_updates(10_000) == 768
    assert core.run_updates(10_000) == 0


def test_fine_tuning_keeps_the_bundles_entropy_coefficient(
    small_bundle: PolicyBundle, traffic: Traffic
) -> None:
    assert small_bundle.training is not None
    config = LearnerConfig(algorithm="sac", sac=SACConfig(batch_size=32))
    assert config.effective_sac().autotune_alpha is False
    core = LearnerCore(small_bundle, config)
    core.ingest(traffic(small_bundle, 64))
    core.run_updates(64)
    assert core.sac.updates == 64
    assert float(core.sac.log_alpha.detach()) == pytest.approx(small_bundle.training.log_alpha)


def test_an_ensemble_with_layer_norm_checkpoints_and_resumes(tmp_path: Path) -> None:
    config = SACConfig(critic_ensemble_size=4, critic_target_subset=2, critic_layer_norm=True)
    original = SAC(ARCH, config)
    for i in range(3):
        original.update(batch(i))
    progress = LearnerProgress(3, 2, 1, 96, 0)
    save_checkpoint(tmp_path / "ckpt", original, deployed=original.actor_state(), progress=progress)
    restored = SAC(ARCH, config.model_copy(update={"seed": 9}))
    restore_checkpoint(tmp_path / "ckpt", restored)
    for module in ("actor", "critic", "critic_target"):
        a, b = _state(getattr(original, module)), _state(getattr(restored, module))
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a)
    restored._generator.set_state(original._generator.get_state())
    x, y = original.update(batch(7)), restored.update(batch(7))
    assert x == y

    with pytest.raises(CheckpointError, match="critic_ensemble_size"):
        restore_checkpoint(tmp_path / "ckpt", SAC(ARCH, SACConfig()))


def test_prior_data_is_refused_for_a_robot_without_a_simulator(tmp_path: Path) -> None:
    from tests.policy.conftest import make_spec
    from tether.policy import init_bundle

    bundle = init_bundle(tmp_path / "b", make_spec(), hidden_sizes=(8,), with_training=True)
    with pytest.raises(LearningError, match=r"prior\.episodes"):
        LearnerCore(bundle, LearnerConfig(algorithm="sac", prior=PriorDataConfig(episodes=1)))
