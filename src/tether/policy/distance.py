"""How far one policy's behaviour is from another's on the same states.

Two numbers, computed here and nowhere else: the RMS change of the deterministic
(squashed) action and the mean KL divergence between the two Gaussian policies. The
learner's trust region (``tether.learning.publication``) bounds them before it
publishes, and the gate's offline stage (``tether.versions.stages.offline``) measures
them again on the published candidate.

The KL is computed on the pre-tanh Gaussians: tanh is a bijection, so the KL between
the squashed policies is the same number.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tether.policy.networks import Actor

# The trust region's bounds, by default the same for the learner's publication and the
# gate's offline stage (each config may set its own).
MAX_ACTION_CHANGE_RMS = 0.1  # normalized action units
MAX_KL_NATS = 0.05
# For an actor with a goal shift: how far its shift may move (the shifted slice's unit,
# rad for the arm's command: 0.1 rad moves the end effector by up to ~5 cm). Its own
# layers are frozen and its pre-tanh std is that of the pretrained actor (~0.02 for the
# shipped arm policy), so any change of what it reads is many nats of KL: the bound is on
# the shift itself. It lets one publication carry most of the drifted arm's correction
# (0.05-0.15 rad per joint), so a run's gate judges it once, not three times.
MAX_GOAL_SHIFT_CHANGE = 0.1


@dataclass(frozen=True)
class PolicyDistance:
    """How far a candidate's behaviour is from a reference policy's, on a set of states."""

    action_change_rms: float  # normalized action units
    kl: float  # nats, mean over states
    goal_shift_change: float = 0.0  # shifted slice's unit, max over states (goal shifts only)


def gaussian_kl(
    mu_p: torch.Tensor, log_std_p: torch.Tensor, mu_q: torch.Tensor, log_std_q: torch.Tensor
) -> torch.Tensor:
    """KL(p || q) of diagonal Gaussians, summed over the last dimension."""
    var_p = (2 * log_std_p).exp()
    var_q = (2 * log_std_q).exp()
    return (log_std_q - log_std_p + (var_p + (mu_p - mu_q) ** 2) / (2 * var_q) - 0.5).sum(-1)


def policy_distance(
    mu_ref: torch.Tensor,
    log_std_ref: torch.Tensor,
    mu_new: torch.Tensor,
    log_std_new: torch.Tensor,
) -> PolicyDistance:
    """RMS of ``tanh(mu_new) - tanh(mu_ref)`` and mean KL(ref || new), over the rows given.

    No rows: both are infinite, so an empty set of states never passes a bound.
    """
    if mu_new.numel() == 0:
        return PolicyDistance(action_change_rms=float("inf"), kl=float("inf"))
    change = torch.tanh(mu_new) - torch.tanh(mu_ref)
    rms = float(change.pow(2).mean().sqrt())
    kl = float(gaussian_kl(mu_ref, log_std_ref, mu_new, log_std_new).mean())
    return PolicyDistance(action_change_rms=rms, kl=kl)


def goal_shift_change(reference: Actor, candidate: Actor, states: torch.Tensor) -> float:
    """The largest change, over ``states`` (normalized) and goal entries, of where two
    actors with the same goal shift reach, in the shifted slice's own unit (rad for the
    arm's command).

    An actor with a goal shift moves the goal it reads; its own layers are the same in
    both, so this is the whole change in what it does. No rows: infinite, as above.
    """
    if reference.goal is None or candidate.goal is None:
        raise ValueError("goal_shift_change compares two actors that both carry a goal shift")
    if states.shape[0] == 0:
        return float("inf")
    change = candidate.goal.reach(states) - reference.goal.reach(states)
    return float(change.abs().max())
