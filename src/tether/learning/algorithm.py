"""The narrow interface every learning algorithm implements, and the one place that
builds the algorithm a :class:`LearnerConfig` names.

Outside :mod:`tether.learning` nothing knows which algorithm runs: the learner, its
checkpoints, publication and the gate see an :class:`Algorithm` (an actor whose state
they read, an update count, optional critics for the gate, modules and optimizers to
checkpoint). ``update(batch) -> stats`` is each algorithm's own (its batch is what its
data path produces: SAC's replay sample, PPO's rollout mini-batch); the learner core
drives it.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from tether.policy.networks import Actor, ActorArchitecture, TwinCritic

StateDict = dict[str, torch.Tensor]


class Algorithm(Protocol):
    """What the learner, publication, the gate and checkpoints read of an algorithm."""

    name: str
    arch: ActorArchitecture
    actor: Actor
    updates: int

    def actor_state(self) -> StateDict:
        """A detached copy of the actor's parameters, named as in the bundle."""
        ...

    def load_actor_state(self, state: StateDict) -> None: ...

    def gate_critic(self) -> TwinCritic | None:
        """Action-value critics for the gate's offline stage; None when there are none."""
        ...

    def modules(self) -> dict[str, nn.Module]:
        """Every trained network by checkpoint prefix."""
        ...

    def optimizers(self) -> dict[str, torch.optim.Optimizer]: ...

    def extra_tensors(self) -> dict[str, torch.Tensor]:
        """Checkpointed state that is neither a module nor an optimizer."""
        ...

    def load_extra_tensors(self, tensors: dict[str, torch.Tensor]) -> None: ...

    def checkpoint_shape(self) -> dict[str, int | bool | str]:
        """What a checkpoint must match to load into this algorithm."""
        ...
