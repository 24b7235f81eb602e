"""The learner's critics: an ensemble of Q networks, optionally with LayerNorm, that
starts from the bundle's twin critics.

With two members and no LayerNorm this is exactly the bundle's ``TwinCritic`` (clipped
double-Q: the target is the minimum of both). More members give REDQ/RLPD's ensemble:
each target is the minimum over a random subset of ``target_subset`` members, and the
actor follows the members' mean. LayerNorm after each hidden linear layer (RLPD) bounds
how far the critic extrapolates away from the data.

Warm start (``load_twin``): member ``i`` takes the bundle's ``q1`` (even ``i``) or ``q2``
(odd ``i``) linear weights. Members past the first two are those weights times
``1 + member_noise * N(0, 1)`` elementwise, so they start calibrated but are not
identical (identical members regressed on identical targets would stay identical). With
LayerNorm the bundle's weights no longer compute the bundle's values (its critics had
no normalization); the learner's critic-only warm-up recalibrates them on the robot's
data before the actor moves (``SACConfig.actor_warmup_updates``).

Invariant: ``forward`` returns one row of Q values per member, in member order; nothing
here samples except ``target_min``, and it draws only from the generator it is given.
"""

from __future__ import annotations

import torch
from torch import nn

from tether.policy.networks import ActorArchitecture, TwinCritic, activation_module


class _Member(nn.Module):
    """One Q network: ``Linear`` (+ ``LayerNorm``) + activation per hidden layer, then a
    linear output. Its linear layers are named as ``QNetwork``'s are when there is no
    LayerNorm (``body.0``, ``body.2``, ..., ``out``), so bundle weights load by name."""

    def __init__(self, arch: ActorArchitecture, layer_norm: bool) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        last = arch.obs_dim + arch.act_dim
        for h in arch.hidden_sizes:
            layers.append(nn.Linear(last, h))
            if layer_norm:
                layers.append(nn.LayerNorm(h))
            layers.append(activation_module(arch.activation))
            last = h
        self.body = nn.Sequential(*layers)
        self.out = nn.Linear(last, 1)

    def linears(self) -> list[nn.Linear]:
        return [m for m in self.body if isinstance(m, nn.Linear)] + [self.out]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x)).squeeze(-1)  # type: ignore[no-any-return]


class CriticEnsemble(nn.Module):
    """``size`` Q networks over (normalized observation, action in [-1, 1])."""

    def __init__(self, arch: ActorArchitecture, *, size: int = 2, layer_norm: bool = False) -> None:
        super().__init__()
        if size < 2:
            raise ValueError(f"a critic ensemble needs at least 2 members, got {size}")
        self.arch = arch
        self.layer_norm = layer_norm
        self.members = nn.ModuleList(_Member(arch, layer_norm) for _ in range(size))

    @property
    def size(self) -> int:
        return len(self.members)

    def _member(self, i: int) -> _Member:
        member = self.members[i]
        assert isinstance(member, _Member)
        return member

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """Q of every member: shape ``(size, batch)``."""
        x = torch.cat([obs, act], dim=-1)
        return torch.stack([m(x) for m in self.members])

    def target_min(
        self, obs: torch.Tensor, act: torch.Tensor, subset: int, generator: torch.Generator
    ) -> torch.Tensor:
        """Minimum over ``subset`` members drawn at random (all members when ``subset``
        is the ensemble's size: no draw, the clipped double-Q of a pair)."""
        if subset >= self.size:
            chosen = list(self.members)
        else:
            order = torch.randperm(self.size, generator=generator)[:subset].tolist()
            chosen = [self.members[i] for i in order]
        x = torch.cat([obs, act], dim=-1)
        return torch.stack([m(x) for m in chosen]).min(dim=0).values

    def actor_value(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """The value the actor climbs: the pair's minimum (SAC) for two members, the
        ensemble mean (REDQ) for more."""
        q: torch.Tensor = self(obs, act)
        return q.min(dim=0).values if self.size == 2 else q.mean(dim=0)

    @torch.no_grad()
    def load_twin(
        self, state: dict[str, torch.Tensor], *, member_noise: float, generator: torch.Generator
    ) -> None:
        """Warm-start every member from a ``TwinCritic`` state dict (see the module doc)."""
        for i in range(self.size):
            member = self._member(i)
            prefix = "q1." if i % 2 == 0 else "q2."
            names = [f"body.{2 * j}" for j in range(len(self.arch.hidden_sizes))] + ["out"]
            for name, linear in zip(names, member.linears(), strict=True):
                for part in ("weight", "bias"):
                    value = state[f"{prefix}{name}.{part}"]
                    if i >= 2 and member_noise > 0:
                        noise = torch.randn(value.shape, generator=generator)
                        value = value * (1.0 + member_noise * noise)
                    getattr(linear, part).copy_(value)


class EnsembleAsTwin(TwinCritic):
    """The ensemble seen through ``TwinCritic``'s call, for readers that take a twin
    critic (the gate's offline stage takes the minimum of the pair): both outputs are the
    ensemble's minimum, so the check is at least as pessimistic as the learner's target."""

    def __init__(self, ensemble: CriticEnsemble) -> None:
        nn.Module.__init__(self)  # no q1/q2 of its own: it reads the ensemble's members
        self.ensemble = ensemble

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.ensemble(obs, act).min(dim=0).values
        return q, q
