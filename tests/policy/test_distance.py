"""How far two policies are apart: one computation for the trust region and the gate."""

from __future__ import annotations

import math

import torch

from tether.policy.distance import gaussian_kl, policy_distance


def test_gaussian_kl_matches_torch_distributions() -> None:
    g = torch.Generator().manual_seed(0)
    mu_p, mu_q = torch.randn(7, 3, generator=g), torch.randn(7, 3, generator=g)
    ls_p, ls_q = 0.3 * torch.randn(7, 3, generator=g), 0.3 * torch.randn(7, 3, generator=g)
    p = torch.distributions.Normal(mu_p, ls_p.exp())
    q = torch.distributions.Normal(mu_q, ls_q.exp())
    expected = torch.distributions.kl_divergence(p, q).sum(-1)
    torch.testing.assert_close(gaussian_kl(mu_p, ls_p, mu_q, ls_q), expected)
    torch.testing.assert_close(gaussian_kl(mu_p, ls_p, mu_p, ls_p), torch.zeros(7))


def test_policy_distance_is_the_rms_of_the_squashed_change_and_the_mean_kl() -> None:
    g = torch.Generator().manual_seed(1)
    mu_ref, mu_new = torch.randn(9, 3, generator=g), torch.randn(9, 3, generator=g)
    ls_ref, ls_new = 0.2 * torch.randn(9, 3, generator=g), 0.2 * torch.randn(9, 3, generator=g)
    d = policy_distance(mu_ref, ls_ref, mu_new, ls_new)
    rms = float((torch.tanh(mu_new) - torch.tanh(mu_ref)).pow(2).mean().sqrt())
    kl = float(gaussian_kl(mu_ref, ls_ref, mu_new, ls_new).mean())
    assert (d.action_change_rms, d.kl) == (rms, kl)
    same = policy_distance(mu_ref, ls_ref, mu_ref, ls_ref)
    assert (same.action_change_rms, same.kl) == (0.0, 0.0)


def test_no_states_is_infinitely_far_so_no_bound_passes() -> None:
    empty = torch.zeros(0, 3)
    d = policy_distance(empty, empty, empty, empty)
    assert math.isinf(d.action_change_rms)
    assert math.isinf(d.kl)
