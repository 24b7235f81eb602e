"""A learned model of the robot the policy acts on, and the actor loss it gives (Dyna).

:class:`DynamicsModel` is an ensemble of MLPs fitted on the robots' own transitions:
from a normalized observation and the actor's output ``u`` it predicts the change of
the normalized observation and the reward. Nothing about the arm is written in: what
it knows of the drift it learnt from the replay buffer, the way the critics do.

:func:`model_actor_loss` is the actor objective of ``SACConfig.actor_objective =
"model"``: from the batch's states, the actor's mean action is rolled through the
model for ``model_horizon`` steps, and the loss is minus the discounted sum of the
predicted rewards (plus, when ``model_terminal_weight`` > 0, the critics' value of the
last state, discounted). Its gradient reaches the actor through the model's smooth,
well-conditioned action dependence (a command moves the joints) instead of through a
critic that has only ever seen the deployed policy's thin tube of actions, whose action
gradient there is extrapolation (docs/benchmarks.md, "Adaptation on the position arm").
Each rollout step uses one member drawn at random per row, so the actor cannot exploit
one member's error (MBPO/PETS).

Invariant: :meth:`DynamicsModel.fit` changes only the model's parameters; the loss
changes nothing (its caller steps the actor's optimizer).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch
from torch import nn


class DynamicsModel(nn.Module):
    """``members`` MLPs ``(obs, u) -> (Δobs, reward)`` over normalized observations, their
    weights stacked so every layer of every member is one batched matmul."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: tuple[int, ...],
        members: int,
        lr: float,
        seed: int,
    ) -> None:
        super().__init__()
        self.obs_dim = obs_dim
        self.size = members
        widths = [obs_dim + act_dim, *hidden, obs_dim + 1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        generator = torch.Generator().manual_seed(seed)
        for fan_in, fan_out in itertools.pairwise(widths):
            # nn.Linear's default initialization, per member.
            bound = 1.0 / math.sqrt(fan_in)
            w = (torch.rand(members, fan_in, fan_out, generator=generator) * 2 - 1) * bound
            b = (torch.rand(members, 1, fan_out, generator=generator) * 2 - 1) * bound
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(b))
        self.optimizer = torch.optim.Adam(self.parameters(), lr=lr)
        self.fits = 0

    def member(self, index: int, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """Member ``index``'s raw output ``(B, obs_dim + 1)`` (for inspection and tests)."""
        return self._all(obs, act)[index]

    def _all(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, act], dim=-1).expand(self.size, -1, -1)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = torch.baddbmm(b, x, w)
            if i < last:
                x = nn.functional.silu(x)
        return x  # (members, B, obs_dim + 1)

    def fit(
        self, obs: torch.Tensor, act: torch.Tensor, reward: torch.Tensor, nxt: torch.Tensor
    ) -> float:
        """One Adam step of every member on the batch (mean squared error); returns it."""
        target = torch.cat([nxt - obs, reward[:, None]], dim=-1)
        loss = ((self._all(obs, act) - target) ** 2).mean(dim=(1, 2)).sum()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        self.optimizer.step()
        self.fits += 1
        return float(loss.detach()) / self.size

    def step(
        self, obs: torch.Tensor, act: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(next_obs, reward)`` from one member drawn per row (differentiable)."""
        out = self._all(obs, act)
        pick = torch.randint(self.size, (obs.shape[0],), generator=generator)
        chosen = out[pick, torch.arange(obs.shape[0])]
        return obs + chosen[:, : self.obs_dim], chosen[:, self.obs_dim]


def model_actor_loss(
    model: DynamicsModel,
    policy: Callable[[torch.Tensor], torch.Tensor],
    obs: torch.Tensor,
    *,
    horizon: int,
    gamma: float,
    generator: torch.Generator,
    terminal_value: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    terminal_weight: float = 0.0,
) -> torch.Tensor:
    """Minus the mean discounted return of ``policy`` (obs -> action in [-1, 1]) over
    ``horizon`` imagined steps from ``obs``, plus the terminal value when given."""
    model.requires_grad_(False)
    try:
        total = torch.zeros(obs.shape[0])
        state = obs
        discount = 1.0
        for _ in range(horizon):
            action = policy(state)
            state, reward = model.step(state, action, generator)
            total = total + discount * reward
            discount *= gamma
        if terminal_value is not None and terminal_weight > 0:
            total = total + terminal_weight * discount * terminal_value(state, policy(state))
    finally:
        model.requires_grad_(True)
    return -total.mean()
