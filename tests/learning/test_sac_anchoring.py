"""Fine-tuning options of SAC: the behaviour-cloning pull toward the reference actor, the
critic-only warm-up and the AWAC actor objective. Each test has a twin without the
mechanism that behaves differently, so the assertion on the mechanism can fail."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.learning.test_sac import make_batch
from tether.assets import load_pretrained_bundle
from tether.data.records import TransitionBatch
from tether.learning.config import SACConfig
from tether.learning.learner_config import LearnerConfig
from tether.learning.sac import SAC, sac_from_bundle
from tether.policy.networks import ActorArchitecture

ARCH = ActorArchitecture(obs_dim=3, act_dim=2, hidden_sizes=(32, 32))
PROBE = np.random.default_rng(9).standard_normal((256, ARCH.obs_dim)).astype(np.float32)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def greedy_batch(rng: np.random.Generator, n: int = 128) -> TransitionBatch:
    """Reward = the first action component: the critic soon says "push a[0] to +1",
    which drags an unanchored actor far from where it started."""
    act = rng.uniform(-1, 1, (n, ARCH.act_dim))
    return make_batch(
        rng.standard_normal((n, ARCH.obs_dim)),
        act,
        act[:, 0].copy(),
        rng.standard_normal((n, ARCH.obs_dim)),
    )


def drift_after(config: SACConfig, updates: int) -> float:
    """Mean |change| of the deterministic action on fixed probe states after training."""
    sac = SAC(ARCH, config)
    before = sac.act(PROBE, deterministic=True)
    rng = np.random.default_rng(0)
    for _ in range(updates):
        sac.update(greedy_batch(rng))
    return float(np.abs(sac.act(PROBE, deterministic=True) - before).mean())


def test_behaviour_cloning_keeps_the_actor_near_its_reference() -> None:
    base = SACConfig(gamma=0.5, actor_lr=3e-3, critic_lr=3e-3, seed=1)
    free = drift_after(base, 300)
    anchored = drift_after(base.model_copy(update={"bc_weight": 20.0}), 300)
    assert free > 0.2, f"the greedy reward should drag a free actor far; moved {free:.3f}"
    assert anchored < 0.25 * free, f"anchored moved {anchored:.3f} vs free {free:.3f}"


def test_reference_is_the_initial_actor_and_stays_frozen() -> None:
    sac = SAC(ARCH, SACConfig(bc_weight=1.0, actor_lr=3e-3))
    initial = sac.actor_state()
    rng = np.random.default_rng(3)
    for _ in range(20):
        sac.update(greedy_batch(rng))
    assert sac.reference is not None
    for name, tensor in sac.reference.state_dict().items():
        assert torch.equal(tensor, initial[name]), name
    assert any(not torch.equal(v, initial[k]) for k, v in sac.actor_state().items())
    assert SAC(ARCH, SACConfig()).reference is None


def test_warmup_trains_only_the_critics_until_its_count() -> None:
    sac = SAC(ARCH, SACConfig(actor_warmup_updates=10, seed=2))
    initial = sac.actor_state()
    alpha = sac.alpha
    critic = [p.clone() for p in sac.critic.parameters()]
    rng = np.random.default_rng(4)
    stats = [sac.update(greedy_batch(rng)) for _ in range(10)]
    assert all(np.isnan(s.actor_loss) for s in stats)
    for name, tensor in sac.actor_state().items():
        assert torch.equal(tensor, initial[name]), name
    assert sac.alpha == alpha
    assert any(not torch.equal(a, b) for a, b in zip(sac.critic.parameters(), critic, strict=True))
    after = sac.update(greedy_batch(rng))
    assert np.isfinite(after.actor_loss)
    assert any(not torch.equal(v, initial[k]) for k, v in sac.actor_state().items())


def awac_mean_first_action(beta: float) -> float:
    sac = SAC(
        ARCH, SACConfig(actor_objective="awac", awac_beta=beta, gamma=0.5, actor_lr=3e-3, seed=5)
    )
    rng = np.random.default_rng(6)
    for _ in range(300):
        sac.update(greedy_batch(rng))
    return float(sac.act(PROBE, deterministic=True)[:, 0].mean())


def test_awac_moves_toward_the_batch_actions_the_critic_rates_higher() -> None:
    # Uniform batch actions: with weights that ignore the advantage (beta -> 0) AWAC is
    # plain behaviour cloning of the batch and its mean first action stays near 0.
    weighted = awac_mean_first_action(3.0)
    unweighted = awac_mean_first_action(1e-3)
    assert weighted > 0.3, f"advantage weighting should push a[0] up; got {weighted:.3f}"
    assert abs(unweighted) < 0.15, f"uniform weights should clone the batch; got {unweighted:.3f}"


def test_the_learners_fine_tuning_anchors_to_the_bundle_actor() -> None:
    bundle = load_pretrained_bundle()
    sac = sac_from_bundle(bundle, LearnerConfig().effective_sac())
    assert sac.reference is not None
    expected = bundle.build_actor().state_dict()
    for name, tensor in sac.reference.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
    from_scratch = LearnerConfig(fine_tune=False).effective_sac()
    assert sac_from_bundle(bundle, from_scratch).reference is None
