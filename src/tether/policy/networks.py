"""The networks a policy is made of: a tanh-squashed Gaussian actor and twin Q critics.

The actor is split into a ``trunk`` (feature layers) and a ``head`` (mean and log-std),
so fine-tuning on the robot can freeze the trunk and train only the head. Both networks
take *normalized* observations; normalization and scaling to the robot's action bounds
live in the engine, never in a client.

A bundle with named inputs and an action horizon ``H`` (kind ``cnn_chunk_gaussian``) has a
:class:`ChunkActor`: one small convolutional encoder per image input (stride-2 3x3
convolutions, then the mean over the image), whose features join the normalized state
vector in the same trunk, and a head giving the Gaussian of all ``H * act_dim`` outputs.

An ``mlp_gaussian`` actor may carry a :class:`GoalShift`: a small residual network, zero
at initialization, that moves one slice of the observation the actor reads (normalized)
by a bounded amount before the trunk sees it (``goal.*`` parameters): the goal it reaches
for (the arm's ``target``), or the command it steps from (the arm's ``command``, whose
shift offsets the command it ends holding; ``tether.learning.hindsight``). The actor
itself stays the policy it was; what can be learned is how it reads that slice, at most
``scale`` normalized units (``GoalShift.bound`` in the slice's own unit) away from what
the robot reported.

Parameter names are part of the bundle format (``trunk.0.weight``, ``head.mu.weight``,
...): :func:`actor_parameter_shapes` derives them from the architecture so a loader
can verify a weights file without building a network.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from tether.policy.numerics import blas_pin

# Every GEMM tether runs goes through these networks (``paths`` and ``engine`` import this
# module): MKL's numerical mode is pinned here, before the first one can run.
blas_pin()

Activation = Literal["relu", "tanh", "elu", "silu"]
ArchitectureKind = Literal["mlp_gaussian", "cnn_chunk_gaussian"]
ARCHITECTURE_KINDS: tuple[ArchitectureKind, ...] = ("mlp_gaussian", "cnn_chunk_gaussian")
# A chunk is executed one control period per step: beyond a few seconds of steps it is a
# trajectory, not a chunk.
MAX_HORIZON = 256

LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0

_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "elu": nn.ELU,
    "silu": nn.SiLU,
}


@dataclass(frozen=True)
class GoalShift:
    """A learned, bounded shift of an observation slice an ``mlp_gaussian`` actor reads
    (its goal, in the wide sense of the module docstring)."""

    goal: tuple[int, int]
    """Observation slice ``(start, stop)`` the shift moves."""
    hidden_sizes: tuple[int, ...]
    """Hidden layers of the residual network (ReLU)."""
    bound: tuple[float, ...]
    """The largest shift per entry, in the slice's own unit (rad for the arm's command, m for
    its target)."""
    scale: tuple[float, ...]
    """The same bound in normalized units: ``bound * inv_std`` of the goal entries."""

    def __post_init__(self) -> None:
        start, stop = self.goal
        width = stop - start
        if start < 0 or width <= 0:
            raise ValueError(f"goal_shift.goal must be a non-empty slice, got {self.goal}")
        if not self.hidden_sizes or any(h <= 0 for h in self.hidden_sizes):
            raise ValueError(
                f"goal_shift.hidden_sizes must be non-empty and positive, got {self.hidden_sizes}"
            )
        for name, values in (("bound", self.bound), ("scale", self.scale)):
            if len(values) != width or not all(math.isfinite(v) and v > 0 for v in values):
                raise ValueError(
                    f"goal_shift.{name} needs {width} positive finite values, got {list(values)}"
                )

    @property
    def width(self) -> int:
        return self.goal[1] - self.goal[0]


@dataclass(frozen=True)
class ActorArchitecture:
    """What the actor looks like; stored in the bundle manifest."""

    obs_dim: int
    act_dim: int
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: Activation = "relu"
    kind: ArchitectureKind = "mlp_gaussian"
    horizon: int = 1
    """Actions per call (the action chunk's length); 1 for ``mlp_gaussian``."""
    image_channels: tuple[int, ...] = ()
    """Channels of each image input, in the manifest's input order (``cnn_chunk_gaussian``)."""
    conv_channels: tuple[int, ...] = ()
    """Output channels of each convolution of an image encoder (``cnn_chunk_gaussian``)."""
    goal_shift: GoalShift | None = None
    """A learned bounded shift of the goal the actor reads (``mlp_gaussian`` only)."""

    def __post_init__(self) -> None:
        if self.obs_dim <= 0 or self.act_dim <= 0:
            raise ValueError(
                f"ActorArchitecture dims must be positive, got obs_dim={self.obs_dim} act_dim={self.act_dim}"
            )
        if not self.hidden_sizes or any(h <= 0 for h in self.hidden_sizes):
            raise ValueError(
                f"hidden_sizes must be non-empty and positive, got {self.hidden_sizes}"
            )
        if self.activation not in _ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(_ACTIVATIONS)}, got {self.activation!r}"
            )
        if self.kind not in ARCHITECTURE_KINDS:
            raise ValueError(f"kind must be one of {list(ARCHITECTURE_KINDS)}, got {self.kind!r}")
        if self.kind == "mlp_gaussian":
            if self.horizon != 1 or self.image_channels or self.conv_channels:
                raise ValueError(
                    "an 'mlp_gaussian' actor has horizon 1 and no image encoder, got "
                    f"horizon={self.horizon} image_channels={self.image_channels} "
                    f"conv_channels={self.conv_channels}; use kind 'cnn_chunk_gaussian'"
                )
            if self.goal_shift is not None and self.goal_shift.goal[1] > self.obs_dim:
                raise ValueError(
                    f"goal_shift.goal {self.goal_shift.goal} lies outside the {self.obs_dim} "
                    "observation entries"
                )
            return
        if self.goal_shift is not None:
            raise ValueError(f"a goal shift is for 'mlp_gaussian' actors, not {self.kind!r}")
        if not 1 <= self.horizon <= MAX_HORIZON:
            raise ValueError(f"horizon must be between 1 and {MAX_HORIZON}, got {self.horizon}")
        if not self.image_channels or any(c <= 0 for c in self.image_channels):
            raise ValueError(
                "a 'cnn_chunk_gaussian' actor needs at least one image input with positive "
                f"channels, got image_channels={self.image_channels}"
            )
        if not self.conv_channels or any(c <= 0 for c in self.conv_channels):
            raise ValueError(
                f"conv_channels must be non-empty and positive, got {self.conv_channels}"
            )

    def without_goal_shift(self) -> ActorArchitecture:
        """The same actor without its goal shift (what reads the shifted observation)."""
        return dataclasses.replace(self, goal_shift=None)

    @property
    def out_dim(self) -> int:
        """Outputs of the head: every step of the chunk."""
        return self.act_dim * self.horizon

    @property
    def trunk_in_dim(self) -> int:
        """The trunk's input: the state vector and, per image, the encoder's features."""
        features = self.conv_channels[-1] if self.conv_channels else 0
        return self.obs_dim + features * len(self.image_channels)


def activation_module(name: str) -> nn.Module:
    """A fresh activation module for ``name`` (one of :data:`Activation`)."""
    return _ACTIVATIONS[name]()


def _mlp(in_dim: int, hidden: tuple[int, ...], activation: str) -> nn.Sequential:
    layers: list[nn.Module] = []
    last = in_dim
    for h in hidden:
        layers += [nn.Linear(last, h), _ACTIVATIONS[activation]()]
        last = h
    return nn.Sequential(*layers)


class GaussianHead(nn.Module):
    """Mean and clamped log-std of the pre-tanh Gaussian."""

    def __init__(self, in_dim: int, act_dim: int) -> None:
        super().__init__()
        self.mu = nn.Linear(in_dim, act_dim)
        self.log_std = nn.Linear(in_dim, act_dim)
        # attributes, not globals, so `tether export` can script this module
        self.log_std_min = LOG_STD_MIN
        self.log_std_max = LOG_STD_MAX

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_std = torch.clamp(self.log_std(features), self.log_std_min, self.log_std_max)
        return self.mu(features), log_std


class GoalShiftNet(nn.Module):
    """The residual of a :class:`GoalShift`: ``scale * tanh(net(obs))`` added to the goal.

    Its last layer starts at zero, so a fresh shift moves nothing: the actor with it acts
    exactly as the actor without it.
    """

    def __init__(self, obs_dim: int, shift: GoalShift) -> None:
        super().__init__()
        out = nn.Linear(shift.hidden_sizes[-1], shift.width)
        nn.init.zeros_(out.weight)
        nn.init.zeros_(out.bias)
        self.net = nn.Sequential(*_mlp(obs_dim, shift.hidden_sizes, "relu"), out)
        self.scale: torch.Tensor
        self.bound: torch.Tensor
        for name in ("scale", "bound"):
            values = torch.tensor(getattr(shift, name), dtype=torch.float32)
            self.register_buffer(name, values, persistent=False)
        self.start, self.stop = shift.goal

    def shift(self, obs: torch.Tensor) -> torch.Tensor:
        """The goal's shift ``(B, width)`` in normalized units."""
        return torch.tanh(self.net(obs)) * self.scale

    def reach(self, obs: torch.Tensor) -> torch.Tensor:
        """The same shift in the slice's own unit (rad for the arm's command, m for its
        target)."""
        return torch.tanh(self.net(obs)) * self.bound

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs`` with its goal slice shifted."""
        goal = obs[:, self.start : self.stop] + self.shift(obs)
        return torch.cat([obs[:, : self.start], goal, obs[:, self.stop :]], dim=1)


class Actor(nn.Module):
    """Tanh-squashed Gaussian policy over normalized observations; actions in [-1, 1]."""

    def __init__(self, arch: ActorArchitecture) -> None:
        super().__init__()
        self.arch = arch
        self.trunk = _mlp(arch.obs_dim, arch.hidden_sizes, arch.activation)
        self.head = GaussianHead(arch.hidden_sizes[-1], arch.act_dim)
        self.goal: GoalShiftNet | None = None
        if arch.goal_shift is not None:
            self.goal = GoalShiftNet(arch.obs_dim, arch.goal_shift)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(mu, log_std)`` of the pre-squash Gaussian."""
        if self.goal is not None:
            obs = self.goal(obs)
        return self.head(self.trunk(obs))  # type: ignore[no-any-return]

    def sample(
        self,
        obs: torch.Tensor,
        *,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(action in [-1, 1], log_prob)``; deterministic gives ``tanh(mu)``."""
        mu, log_std = self(obs)
        return squashed_sample(mu, log_std, deterministic=deterministic, generator=generator)


def _encoder(in_channels: int, channels: tuple[int, ...], activation: str) -> nn.Sequential:
    layers: list[nn.Module] = []
    last = in_channels
    for c in channels:
        layers += [nn.Conv2d(last, c, 3, stride=2, padding=1), _ACTIVATIONS[activation]()]
        last = c
    return nn.Sequential(*layers)


class ChunkActor(nn.Module):
    """A ``cnn_chunk_gaussian`` actor: normalized state and images in, the Gaussian of a
    whole chunk out (``(B, horizon * act_dim)`` each for mean and log-std)."""

    def __init__(self, arch: ActorArchitecture) -> None:
        super().__init__()
        if arch.kind != "cnn_chunk_gaussian":
            raise ValueError(f"ChunkActor needs kind 'cnn_chunk_gaussian', got {arch.kind!r}")
        self.arch = arch
        self.encoders = nn.ModuleList(
            _encoder(c, arch.conv_channels, arch.activation) for c in arch.image_channels
        )
        self.trunk = _mlp(arch.trunk_in_dim, arch.hidden_sizes, arch.activation)
        self.head = GaussianHead(arch.hidden_sizes[-1], arch.out_dim)

    def forward(
        self, state: torch.Tensor, images: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``state`` ``(B, obs_dim)`` normalized; ``images`` ``(B, C, H, W)`` in [0, 1]."""
        features = [state] + [
            enc(img).mean(dim=(2, 3)) for enc, img in zip(self.encoders, images, strict=True)
        ]
        return self.head(self.trunk(torch.cat(features, dim=1)))  # type: ignore[no-any-return]


def squashed_sample(
    mu: torch.Tensor,
    log_std: torch.Tensor,
    *,
    deterministic: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(action in [-1, 1], log_prob)`` of the tanh-squashed Gaussian ``(mu, log_std)``.

    For callers that need ``mu`` too (SAC's actor losses), so the actor runs once. The
    log-probability includes the tanh change of variables, computed in the numerically
    stable form ``2 (log 2 - u - softplus(-2u))``.
    """
    if deterministic:
        u = mu
    else:
        noise = torch.randn(mu.shape, generator=generator, dtype=mu.dtype, device=mu.device)
        u = mu + log_std.exp() * noise
    log_prob = gaussian_log_prob(u, mu, log_std) - squash_correction(u)
    return torch.tanh(u), log_prob


def gaussian_log_prob(u: torch.Tensor, mu: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Sum over action dims of log N(u; mu, exp(log_std))."""
    z = (u - mu) / log_std.exp()
    return (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


def log_prob_terms(u: torch.Tensor, mu: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Per action dim, log N(u; mu, std) - log |d tanh(u) / du|; sum over the last dim = log-prob."""
    z = (u - mu) / log_std.exp()
    gaussian = -0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)
    return gaussian - 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))


def ordered_row_sum(terms: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim, left to right, one elementwise add per column.

    ``Tensor.sum(-1)`` picks its vectorization by the tensor's shape, so a row's sum can
    differ in the last bit between batch sizes; column-by-column adds cannot.
    """
    total = terms[..., 0]
    for j in range(1, terms.shape[-1]):
        total = total + terms[..., j]
    return total


def squash_correction(u: torch.Tensor) -> torch.Tensor:
    """Sum over action dims of log |d tanh(u) / du|."""
    return (2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))).sum(-1)


class QNetwork(nn.Module):
    def __init__(
        self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], activation: str
    ) -> None:
        super().__init__()
        self.body = _mlp(obs_dim + act_dim, hidden, activation)
        self.out = nn.Linear(hidden[-1], 1)

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(torch.cat([obs, act], dim=-1))).squeeze(-1)  # type: ignore[no-any-return]


class TwinCritic(nn.Module):
    """Two independent Q networks (clipped double-Q); actions are normalized [-1, 1]."""

    def __init__(self, arch: ActorArchitecture) -> None:
        super().__init__()
        self.q1 = QNetwork(arch.obs_dim, arch.act_dim, arch.hidden_sizes, arch.activation)
        self.q2 = QNetwork(arch.obs_dim, arch.act_dim, arch.hidden_sizes, arch.activation)

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.q1(obs, act), self.q2(obs, act)


def actor_parameter_shapes(arch: ActorArchitecture) -> dict[str, tuple[int, ...]]:
    """Every tensor name and shape an actor with ``arch`` has (the bundle's weight schema)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for e, in_channels in enumerate(arch.image_channels):
        last = in_channels
        for j, c in enumerate(arch.conv_channels):
            shapes[f"encoders.{e}.{2 * j}.weight"] = (c, last, 3, 3)
            shapes[f"encoders.{e}.{2 * j}.bias"] = (c,)
            last = c
    last = arch.trunk_in_dim
    for i, h in enumerate(arch.hidden_sizes):
        idx = 2 * i  # Sequential interleaves Linear and activation modules
        shapes[f"trunk.{idx}.weight"] = (h, last)
        shapes[f"trunk.{idx}.bias"] = (h,)
        last = h
    for part in ("mu", "log_std"):
        shapes[f"head.{part}.weight"] = (arch.out_dim, last)
        shapes[f"head.{part}.bias"] = (arch.out_dim,)
    if arch.goal_shift is not None:
        shapes.update(goal_shift_parameter_shapes(arch.obs_dim, arch.goal_shift))
    return shapes


GOAL_PREFIX = "goal."


def goal_shift_parameter_shapes(obs_dim: int, shift: GoalShift) -> dict[str, tuple[int, ...]]:
    """The ``goal.*`` tensors of a :class:`GoalShiftNet` (its ``scale`` is not a weight)."""
    shapes: dict[str, tuple[int, ...]] = {}
    last = obs_dim
    for i, h in enumerate((*shift.hidden_sizes, shift.width)):
        shapes[f"{GOAL_PREFIX}net.{2 * i}.weight"] = (h, last)
        shapes[f"{GOAL_PREFIX}net.{2 * i}.bias"] = (h,)
        last = h
    return shapes


def critic_parameter_shapes(arch: ActorArchitecture) -> dict[str, tuple[int, ...]]:
    """Every tensor name and shape of a :class:`TwinCritic` for ``arch`` (training section)."""
    if arch.kind != "mlp_gaussian":
        raise ValueError(
            f"twin critics exist for 'mlp_gaussian' actors only, not {arch.kind!r}; a chunk "
            "policy's bundle has no training section"
        )
    shapes: dict[str, tuple[int, ...]] = {}
    for q in ("q1", "q2"):
        last = arch.obs_dim + arch.act_dim
        for i, h in enumerate(arch.hidden_sizes):
            shapes[f"{q}.body.{2 * i}.weight"] = (h, last)
            shapes[f"{q}.body.{2 * i}.bias"] = (h,)
            last = h
        shapes[f"{q}.out.weight"] = (1, last)
        shapes[f"{q}.out.bias"] = (1,)
    return shapes
