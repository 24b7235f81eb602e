"""The learned-model actor objective (``SACConfig.actor_objective = "model"``)."""

from __future__ import annotations

import numpy as np
import torch

from tests.learning.test_sac import make_batch
from tether.learning.config import SACConfig
from tether.learning.model import DynamicsModel
from tether.learning.sac import SAC
from tether.policy.networks import ActorArchitecture

ARCH = ActorArchitecture(obs_dim=2, act_dim=1, hidden_sizes=(32, 32))


def toy_batch(rng: np.random.Generator, n: int = 256):  # type: ignore[no-untyped-def]
    """A point that the action pushes: x' = x + 0.5 a; reward -x'^2 (the goal is 0).
    The second observation is a constant, as a target would be."""
    x = rng.uniform(-1, 1, n)
    a = rng.uniform(-1, 1, n)
    nxt = x + 0.5 * a
    obs = np.stack([x, np.ones(n)], axis=1)
    return make_batch(obs, a[:, None], -(nxt**2), np.stack([nxt, np.ones(n)], axis=1))


def mean_action(sac: SAC, x: float) -> float:
    with torch.no_grad():
        return float(torch.tanh(sac.actor(torch.tensor([[x, 1.0]]))[0])[0, 0])


def test_the_model_actor_learns_to_push_toward_the_goal() -> None:
    rng = np.random.default_rng(0)
    cfg = SACConfig(
        actor_objective="model", model_horizon=3, model_members=2, actor_lr=3e-3,
        actor_warmup_updates=300, autotune_alpha=False, seed=1,
    )  # fmt: skip
    sac = SAC(ARCH, cfg)
    for _ in range(700):
        sac.update(toy_batch(rng))
    assert sac.model is not None
    assert sac.model_loss < 0.01
    # From +0.8 the best move is negative, from -0.8 positive; an untrained actor's
    # mean is near 0 either way.
    assert mean_action(sac, 0.8) < -0.3
    assert mean_action(sac, -0.8) > 0.3


def test_the_actor_does_not_move_during_the_warm_up_while_the_model_learns() -> None:
    rng = np.random.default_rng(2)
    sac = SAC(ARCH, SACConfig(actor_objective="model", actor_warmup_updates=50, seed=3))
    actor = {k: v.clone() for k, v in sac.actor.state_dict().items()}
    assert sac.model is not None
    model = [p.detach().clone() for p in sac.model.parameters()]
    for _ in range(50):
        sac.update(toy_batch(rng))
    for k, v in sac.actor.state_dict().items():
        assert torch.equal(v, actor[k]), k
    assert any(not torch.equal(a, b) for a, b in zip(model, sac.model.parameters(), strict=True))


def test_fine_tuning_with_the_model_keeps_the_trunk_fixed() -> None:
    rng = np.random.default_rng(4)
    sac = SAC(ARCH, SACConfig(actor_objective="model", seed=5).fine_tuning())
    trunk = {k: v.clone() for k, v in sac.actor.trunk.state_dict().items()}
    head = {k: v.clone() for k, v in sac.actor.head.mu.state_dict().items()}
    for _ in range(20):
        sac.update(toy_batch(rng))
    for k, v in sac.actor.trunk.state_dict().items():
        assert torch.equal(v, trunk[k]), k
    assert any(not torch.equal(v, head[k]) for k, v in sac.actor.head.mu.state_dict().items())


def test_one_member_is_drawn_per_row() -> None:
    model = DynamicsModel(2, 1, (8,), members=3, lr=1e-3, seed=0)
    obs, act = torch.randn(64, 2), torch.randn(64, 1)
    nxt, _ = model.step(obs, act, torch.Generator().manual_seed(0))
    every = torch.stack([obs + model.member(i, obs, act)[:, :2] for i in range(3)])
    # Each row equals exactly one member's prediction, and more than one member is used.
    matches = [(every[i] == nxt).all(-1) for i in range(3)]
    assert bool(torch.stack(matches).any(0).all())
    assert sum(bool(m.any()) for m in matches) > 1


def test_a_restored_learner_refits_its_model_before_the_actor_moves() -> None:
    # The checkpoint restores the update count but not the model (checkpoint.py).
    rng = np.random.default_rng(6)
    sac = SAC(ARCH, SACConfig(actor_objective="model", actor_warmup_updates=10, seed=7))
    sac.updates = 1000
    actor = {k: v.clone() for k, v in sac.actor.state_dict().items()}
    for _ in range(10):
        sac.update(toy_batch(rng))
    for k, v in sac.actor.state_dict().items():
        assert torch.equal(v, actor[k]), k
    sac.update(toy_batch(rng))
    assert any(not torch.equal(v, actor[k]) for k, v in sac.actor.state_dict().items())
