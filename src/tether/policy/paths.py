"""Execution paths: interchangeable ways to compute the actor's ``(mu, log_std)``.

Every path takes a *normalized, padded* observation block ``(n * row_block, obs_dim)`` and
returns ``(mu, log_std)`` for every row. Paths: ``eager`` (torch), ``jit`` (TorchScript,
frozen, ``optimize_for_inference``), ``int8`` (dynamic int8: per-row activation scales,
per-channel weight scales, exact int32 accumulation) and ``numpy`` (a hand float32
forward). ``compiled`` (:class:`CompiledPath`) is not a :class:`ForwardPath`: it takes
the raw observations and does the engine's whole row (normalization, goal shift,
forward, squash, scaling, frame) in one numba call (:mod:`tether.policy.kernel`).

Invariant: a row's result never depends on the other rows in the batch, bit for bit.
BLAS picks different kernels (and summation orders) for different matrix shapes -- at
batch 1 MKL's result differs from batch 64 in the last bits -- so the float paths never
multiply a matrix whose row count depends on the batch: rows go through GEMMs of exactly
``row_block`` rows (a batched matmul over blocks on CPU, one GEMM per block on CUDA).
The int8 path needs no blocking: integer accumulation is exact in any order. Non-exact
activations go through :mod:`tether.policy.uniform` for the same reason. The compiled
path needs neither: it computes each row alone in a fixed order (see its kernel).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import torch
from torch import nn

from tether.policy import kernel
from tether.policy.action_frame import CommandStepFrame
from tether.policy.networks import (
    GOAL_PREFIX,
    LOG_STD_MAX,
    LOG_STD_MIN,
    ActorArchitecture,
    GoalShift,
    activation_module,
)
from tether.policy.tensors import StateDict
from tether.policy.transforms import ObservationNormalizer
from tether.policy.uniform import (
    PARALLEL_GRAIN,
    SIMD_MULTIPLE,
    apply_uniform,
    apply_uniform_np,
    parallel_multiple,
)

PathKind = Literal["eager", "jit", "int8", "numpy", "compiled"]
PATH_KINDS: tuple[PathKind, ...] = ("eager", "jit", "int8", "numpy", "compiled")


class ForwardPath(Protocol):
    """Computes ``(mu, log_std)`` for a normalized block whose row count is a multiple of row_block."""

    kind: PathKind

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


def _layers(arch: ActorArchitecture, state: StateDict) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(weight (out, in), bias)`` per layer, the two heads fused into the last one."""
    out = [
        (state[f"trunk.{2 * i}.weight"].detach(), state[f"trunk.{2 * i}.bias"].detach())
        for i in range(len(arch.hidden_sizes))
    ]
    head_w = torch.cat([state["head.mu.weight"], state["head.log_std.weight"]], dim=0).detach()
    head_b = torch.cat([state["head.mu.bias"], state["head.log_std.bias"]], dim=0).detach()
    out.append((head_w, head_b))
    return out


class BlockActor(nn.Module):
    """The actor's forward with every GEMM ``row_block`` rows tall (see module docstring)."""

    def __init__(
        self,
        arch: ActorArchitecture,
        state: StateDict,
        *,
        row_block: int,
        device: torch.device,
        per_block_gemm: bool,
        num_threads: int,
    ) -> None:
        super().__init__()
        layers = _layers(arch, state)
        self.weights_t = [w.detach().t().contiguous().to(device) for w, _ in layers]
        self.biases = [b.detach().contiguous().to(device) for _, b in layers]
        self.act = activation_module(arch.activation)
        self.exact_activation = arch.activation == "relu"  # max(x, 0) has no SIMD/scalar split
        self.par_multiple = parallel_multiple(num_threads)
        self.simd_multiple = SIMD_MULTIPLE
        self.parallel_grain = PARALLEL_GRAIN
        self.row_block = row_block
        self.act_dim = arch.act_dim
        self.log_std_min = LOG_STD_MIN  # TorchScript cannot read imported module globals
        self.log_std_max = LOG_STD_MAX
        # cuBLAS may pick its batched-GEMM kernel by batch count, so on CUDA each block gets
        # its own GEMM of identical shape; on CPU one batched matmul does all blocks.
        self.per_block_gemm = per_block_gemm

    def _linear(self, h: torch.Tensor, w_t: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if self.per_block_gemm:
            parts = [torch.addmm(b, h[i], w_t) for i in range(h.shape[0])]
            return torch.stack(parts)
        return torch.baddbmm(b, h, w_t.expand(h.shape[0], w_t.shape[0], w_t.shape[1]))

    def _activate(self, h: torch.Tensor) -> torch.Tensor:
        if self.exact_activation:
            exact: torch.Tensor = self.act(h)
            return exact
        # apply_uniform, spelled out because TorchScript cannot take a function argument
        flat = h.reshape(-1)
        n = flat.shape[0]
        multiple = self.simd_multiple if n < self.parallel_grain else self.par_multiple
        pad = (multiple - n % multiple) % multiple
        if pad > 0:
            flat = torch.cat([flat, flat.new_zeros(pad)])
        out: torch.Tensor = self.act(flat)
        return out[:n].reshape(h.shape)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x.reshape(-1, self.row_block, x.shape[1])
        last = len(self.weights_t) - 1
        for i in range(len(self.weights_t)):
            h = self._linear(h, self.weights_t[i], self.biases[i])
            if i < last:
                h = self._activate(h)
        out = h.reshape(-1, 2 * self.act_dim)
        mu = out[:, : self.act_dim]
        log_std = torch.clamp(out[:, self.act_dim :], self.log_std_min, self.log_std_max)
        return mu, log_std


class _ModulePath:
    def __init__(self, kind: PathKind, module: nn.Module) -> None:
        self.kind: PathKind = kind
        self._module = module

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu, log_std = self._module(x)
        return mu, log_std


def _jit_module(block: BlockActor) -> nn.Module:
    # TorchScript is deprecated in favour of torch.compile/torch.export, but it is still the
    # cheapest way to get a frozen, fused CPU graph without a compiler toolchain; the
    # deprecation notice says nothing about this graph, so it is silenced here only.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=DeprecationWarning)
        scripted = torch.jit.script(block.eval())
        frozen = torch.jit.freeze(scripted)
        return torch.jit.optimize_for_inference(frozen)


class _Int8Path:
    """Dynamic int8 linears: x quantized per row, weights per output channel, int32 sums."""

    kind: PathKind = "int8"

    def __init__(self, arch: ActorArchitecture, state: StateDict, num_threads: int) -> None:
        self._act = activation_module(arch.activation)
        self._exact_activation = arch.activation == "relu"
        self._par_multiple = parallel_multiple(num_threads)
        self._act_dim = arch.act_dim
        self._layers: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for w, b in _layers(arch, state):
            scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127.0
            wq = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
            self._layers.append((wq.t().contiguous(), scale, b.detach().clone()))

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x
        last = len(self._layers) - 1
        for i, (wq_t, w_scale, b) in enumerate(self._layers):
            x_scale = h.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0
            hq = torch.round(h / x_scale).clamp(-127, 127).to(torch.int8)
            h = torch._int_mm(hq, wq_t).to(torch.float32) * (x_scale * w_scale) + b
            if i < last:
                h = (
                    torch.relu(h)
                    if self._exact_activation
                    else apply_uniform(self._act, h, self._par_multiple)
                )
        mu = h[:, : self._act_dim]
        log_std = torch.clamp(h[:, self._act_dim :], LOG_STD_MIN, LOG_STD_MAX)
        return mu, log_std


def _np_relu(h: np.ndarray) -> np.ndarray:
    np.maximum(h, np.float32(0.0), out=h)
    return h


def _np_tanh(h: np.ndarray) -> np.ndarray:
    np.tanh(h, out=h)
    return h


def _np_elu(h: np.ndarray) -> np.ndarray:
    return np.where(h > 0, h, np.expm1(h)).astype(np.float32)


def _np_silu(h: np.ndarray) -> np.ndarray:
    return np.asarray(h / (np.float32(1.0) + np.exp(-h)), dtype=np.float32)


# In-place where the ufunc allows; non-exact ones go through apply_uniform_np.
NUMPY_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": _np_relu,
    "tanh": _np_tanh,
    "elu": _np_elu,
    "silu": _np_silu,
}


class _NumpyPath:
    """The same blocked forward written with numpy float32 matmuls."""

    kind: PathKind = "numpy"

    def __init__(self, arch: ActorArchitecture, state: StateDict, row_block: int) -> None:
        self._layers = [
            (w.detach().numpy().T.copy(), b.detach().numpy().copy())
            for w, b in _layers(arch, state)
        ]
        self._act = NUMPY_ACTIVATIONS[arch.activation]
        self._exact_activation = arch.activation == "relu"
        self._act_dim = arch.act_dim
        self._row_block = row_block

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x.numpy().reshape(-1, self._row_block, x.shape[1])
        last = len(self._layers) - 1
        for i, (w_t, b) in enumerate(self._layers):
            h = h @ w_t
            h += b
            if i < last:
                h = self._act(h) if self._exact_activation else apply_uniform_np(self._act, h)
        out = h.reshape(-1, 2 * self._act_dim)
        log_std = out[:, self._act_dim :]
        np.clip(log_std, LOG_STD_MIN, LOG_STD_MAX, out=log_std)
        return torch.from_numpy(out[:, : self._act_dim]), torch.from_numpy(log_std)


@dataclass(frozen=True)
class RowStages:
    """What the engine does around an ``mlp_gaussian`` network for every row, which the
    compiled path does in its one call: the normalizer, the version's goal shift (with
    its ``goal.*`` weights) if it has one, the action bounds and the bundle's frame."""

    normalizer: ObservationNormalizer
    low: np.ndarray
    half_range: np.ndarray
    high: np.ndarray
    goal_shift: tuple[GoalShift, StateDict] | None = None
    frame: CommandStepFrame | None = None


class CompiledPath:
    """Raw observations to bounded actions and log-probs, each row in one fixed order
    (:func:`tether.policy.kernel.act_rows`); CPU only, numba or its Python twin."""

    kind: PathKind = "compiled"

    def __init__(self, arch: ActorArchitecture, state: StateDict, stages: RowStages) -> None:
        goal_layers: list[tuple[np.ndarray, np.ndarray]] = []
        goal: tuple[int, int] = (0, 0)
        scale = np.zeros(0, dtype=np.float32)
        if stages.goal_shift is not None:
            shift, goal_state = stages.goal_shift
            goal, scale = shift.goal, np.asarray(shift.scale, dtype=np.float32)
            goal_layers = [
                (
                    _host(goal_state[f"{GOAL_PREFIX}net.{2 * i}.weight"]),
                    _host(goal_state[f"{GOAL_PREFIX}net.{2 * i}.bias"]),
                )
                for i in range(len(shift.hidden_sizes) + 1)
            ]
        f = stages.frame
        norm = stages.normalizer
        self._packed = kernel.pack(
            layers=[(_host(w), _host(b)) for w, b in _layers(arch, state)],
            goal_layers=goal_layers,
            goal=goal,
            goal_scale=scale,
            activation=arch.activation,
            mean=norm.mean,
            inv_std=norm.inv_std,
            clip=float(norm.clip),
            low=stages.low,
            half_range=stages.half_range,
            high=stages.high,
            log_std_bounds=(LOG_STD_MIN, LOG_STD_MAX),
            frame=None
            if f is None
            else kernel.FrameConstants(
                f.command[0],
                f.command_change[0],
                f.center_rad,
                f.half_range_rad,
                f.acceleration_step_rad,
                f.velocity_step_rad,
            ),
        )

    @property
    def packed(self) -> kernel.Packed:
        """The version's constants as the kernel reads them."""
        return self._packed

    def act(
        self, observations: np.ndarray, noise: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Actions ``(n, act_dim)`` (framed, in bounds) and log-probs ``(n,)`` for raw
        float32 observations; ``noise`` as :func:`tether.policy.squash.squash` takes it."""
        return kernel.run(self._packed, np.ascontiguousarray(observations), noise)


def _host(t: torch.Tensor) -> np.ndarray:
    return np.asarray(t.detach().to("cpu").numpy(), dtype=np.float32)


def build_path(
    kind: PathKind,
    arch: ActorArchitecture,
    state: Mapping[str, torch.Tensor],
    *,
    row_block: int,
    device: torch.device,
    num_threads: int,
    stages: RowStages | None = None,
) -> ForwardPath | CompiledPath:
    """Build the ``kind`` path for ``state`` on ``device`` (int8, numpy and compiled are
    CPU-only; compiled needs the engine's ``stages``)."""
    if kind in ("eager", "jit"):
        block = BlockActor(
            arch,
            state,
            row_block=row_block,
            device=device,
            per_block_gemm=device.type == "cuda",
            num_threads=num_threads,
        ).eval()
        return _ModulePath(kind, _jit_module(block) if kind == "jit" else block)
    if device.type != "cpu":
        raise ValueError(f"execution path {kind!r} runs on cpu only, not {device}")
    if kind == "int8":
        return _Int8Path(arch, state, num_threads)
    if kind == "compiled":
        if stages is None:
            raise ValueError("the compiled path does the engine's stages too: pass stages")
        return CompiledPath(arch, dict(state), stages)
    return _NumpyPath(arch, state, row_block)
