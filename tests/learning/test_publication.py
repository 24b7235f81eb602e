"""Polyak-smoothed deployment and the trust region: the math and the decisions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from tether.learning.publication import (
    PublicationConfig,
    PublishOutcome,
    RecentStates,
    TrustRegion,
    polyak_blend,
)
from tether.policy.networks import Actor, ActorArchitecture

ARCH = ActorArchitecture(obs_dim=5, act_dim=3, hidden_sizes=(16, 16))


def actor_state(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return {k: v.detach().clone() for k, v in Actor(ARCH).state_dict().items()}


def test_polyak_blend_moves_each_tensor_by_alpha() -> None:
    a, b = actor_state(0), actor_state(1)
    out = polyak_blend(a, b, 0.2)
    for k in a:
        torch.testing.assert_close(out[k], 0.8 * a[k] + 0.2 * b[k])
    # Repeated blending converges geometrically: after n steps, (1 - alpha)^n of the gap is left.
    d = a
    for _ in range(10):
        d = polyak_blend(d, b, 0.2)
    gap = (d["head.mu.bias"] - b["head.mu.bias"]).abs()
    torch.testing.assert_close(gap, 0.8**10 * (a["head.mu.bias"] - b["head.mu.bias"]).abs())
    with pytest.raises(ValueError, match="different tensors"):
        polyak_blend(a, {"x": torch.zeros(1)}, 0.2)


def states(n: int = 256) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((n, ARCH.obs_dim)).astype(np.float32)


def test_identical_policies_accept_the_full_step() -> None:
    tr = TrustRegion(Actor(ARCH), PublicationConfig())
    a = actor_state(0)
    decision, published = tr.step(a, a, states())
    assert decision.outcome is PublishOutcome.ACCEPTED
    assert decision.alpha == pytest.approx(0.2)
    assert decision.distance.kl == pytest.approx(0.0, abs=1e-7)
    assert published is not None


def test_large_change_is_shrunk_until_it_fits_and_the_result_is_what_was_measured() -> None:
    a, b = actor_state(0), actor_state(1)
    tr = TrustRegion(Actor(ARCH), PublicationConfig(max_shrink_steps=8))
    full = tr.distance(a, polyak_blend(a, b, 0.2), states())
    # A threshold the full step exceeds but a quarter step meets.
    quarter = tr.distance(a, polyak_blend(a, b, 0.05), states())
    cfg = PublicationConfig(
        max_action_change=(quarter.action_change_rms + full.action_change_rms) / 2,
        max_kl=1e3,
        max_shrink_steps=8,
    )
    tr = TrustRegion(Actor(ARCH), cfg)
    decision, published = tr.step(a, b, states())
    assert decision.outcome is PublishOutcome.SHRUNK
    assert decision.shrink_steps >= 1
    assert decision.distance.action_change_rms <= cfg.max_action_change
    assert published is not None
    for k in a:
        torch.testing.assert_close(published[k], torch.lerp(a[k], b[k], decision.alpha))


def test_step_that_never_fits_is_withheld() -> None:
    a, b = actor_state(0), actor_state(1)
    cfg = PublicationConfig(max_action_change=1e-9, max_kl=1e-12, max_shrink_steps=2)
    decision, published = TrustRegion(Actor(ARCH), cfg).step(a, b, states())
    assert decision.outcome is PublishOutcome.WITHHELD
    assert decision.alpha == 0.0
    assert published is None


def test_kl_threshold_alone_can_withhold() -> None:
    a = actor_state(0)
    b = {k: v.clone() for k, v in a.items()}
    b["head.log_std.bias"] += 1.5  # same mean action, much wider policy
    tr = TrustRegion(Actor(ARCH), PublicationConfig(max_kl=1e-3, max_shrink_steps=0))
    d = tr.distance(a, b, states())
    assert d.action_change_rms == pytest.approx(0.0, abs=1e-7)
    assert d.kl > 1e-3
    decision, _ = tr.step(a, b, states())
    assert decision.outcome is PublishOutcome.WITHHELD


def test_publication_config_enforces_the_polyak_range() -> None:
    with pytest.raises(ValueError, match="polyak_alpha"):
        PublicationConfig(polyak_alpha=1.0)


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(1, 12),
    chunks=st.lists(st.integers(0, 20), min_size=1, max_size=8),
)
def test_recent_states_keeps_exactly_the_last_capacity_rows(
    capacity: int, chunks: list[int]
) -> None:
    ring = RecentStates(capacity, 2)
    seen: list[np.ndarray] = []
    counter = 0
    for n in chunks:
        rows = np.arange(counter, counter + n, dtype=np.float32).repeat(2).reshape(n, 2)
        counter += n
        ring.extend(rows)
        seen.extend(rows)
    expected = sorted(r[0] for r in seen[-capacity:]) if seen else []
    assert len(ring) == min(capacity, len(seen))
    assert sorted(ring.states()[:, 0].tolist()) == expected
