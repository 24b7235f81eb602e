"""``PolicyEngine``: a batch of raw observations in, bounded actions and log-probs out.

Normalization, the network, sampling, scaling to the action bounds and the bundle's
action frame (a step from the observed previous command, :mod:`tether.policy.action_frame`)
all happen here, so a client can never apply the wrong statistics. Invariants:

- every ``act()`` reads the live ``(path, version)`` pair exactly once, so one batch never
  mixes weight versions, and ``swap_weights`` (validated first) takes effect at the next
  call without ever blocking a running one;
- a row's deterministic action is bit-identical whatever batch it arrives in (see
  :mod:`tether.policy.paths`);
- inputs with the wrong shape, dtype or non-finite values are refused with
  :class:`ObservationError` before anything runs;
- every forward runs with the engine's own torch intra-op thread count, whichever thread
  calls it. torch keeps that count per thread and a fresh thread starts at one per core:
  a shadow or evaluation thread running a candidate with two OpenMP threads on a core the
  server shares with its robots spun that core and made the robots' replies miss their
  control deadlines. The count also fixes the padding of the exact activation
  (``paths.py``), so it is part of the numerics, not only of the speed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np
import torch

from tether.policy.bundle import PolicyBundle
from tether.policy.config import EngineConfig
from tether.policy.errors import (
    BundleTensorError,
    EngineConfigError,
    ObservationError,
    WeightSwapError,
)
from tether.policy.manifest import VersionInfo
from tether.policy.networks import actor_parameter_shapes
from tether.policy.numerics import require_pinned_blas
from tether.policy.paths import ForwardPath, PathKind, build_path
from tether.policy.selection import PathMeasurement, choose_path
from tether.policy.squash import squash
from tether.policy.tensors import StateDict, check_state, state_sha256
from tether.policy.transforms import ObservationNormalizer, action_arrays

_WARMUP_CALLS = 3  # TorchScript's profiling executor optimizes after its second run


class EngineOutput(NamedTuple):
    """One batch's result; every row was computed with ``version``."""

    actions: np.ndarray  # (B, act_dim) float32, inside the bundle's action bounds
    log_probs: np.ndarray  # (B,) float32, log-density of the squashed action
    version: VersionInfo


class PolicyEngine:
    """Runs a bundle's actor on batches; see the module docstring for its guarantees."""

    def __init__(self, bundle: PolicyBundle, config: EngineConfig | None = None) -> None:
        self._config = cfg = config if config is not None else EngineConfig()
        self._bundle = bundle
        self._arch = bundle.architecture
        self._device = _resolve_device(cfg.device)
        self._threads = min(torch.get_num_threads(), cfg.num_threads)
        m = bundle.manifest
        self._normalize = ObservationNormalizer(m.normalizer)
        self._low, self._half_range, self._high = action_arrays(m.action)
        self._frame = m.action.frame
        # The sampling generator lives on the host: squash() runs there for every device.
        self._generator = torch.Generator()
        if cfg.seed is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(cfg.seed)
        self._lock = threading.Lock()
        padded_max = _padded(cfg.max_batch_size, cfg.row_block)
        self._pinned_in: torch.Tensor | None = None
        self._pinned_out: torch.Tensor | None = None
        if self._device.type == "cuda":
            self._pinned_in = torch.empty((padded_max, self._arch.obs_dim), pin_memory=True)
            self._pinned_out = torch.empty((padded_max, 2 * self._arch.act_dim), pin_memory=True)
        self._measurements: tuple[PathMeasurement, ...] = ()
        kind: PathKind
        if cfg.execution == "auto":
            kind, self._measurements = choose_path(self, bundle.actor_state)
        else:
            kind = cfg.execution
            if self._device.type != "cpu" and kind in ("int8", "numpy"):
                raise EngineConfigError(
                    f"execution {kind!r} runs on cpu only, but device is {cfg.device!r}; "
                    "use 'eager' or 'jit' on cuda"
                )
        self._kind: PathKind = kind
        self._live: tuple[ForwardPath, VersionInfo] = (
            self.build_path(kind, bundle.actor_state),
            bundle.version,
        )

    # -- what the engine serves -------------------------------------------------------
    @property
    def bundle(self) -> PolicyBundle:
        """The bundle the engine was built from (specs, normalizer, bounds); see ``version``
        for the weights served now."""
        return self._bundle

    @property
    def config(self) -> EngineConfig:
        return self._config

    @property
    def version(self) -> VersionInfo:
        return self._live[1]

    @property
    def obs_dim(self) -> int:
        return self._arch.obs_dim

    @property
    def act_dim(self) -> int:
        return self._arch.act_dim

    @property
    def action_low(self) -> np.ndarray:
        return self._low.copy()

    @property
    def action_high(self) -> np.ndarray:
        return self._high.copy()

    @property
    def execution(self) -> PathKind:
        """The execution path in use (the one 'auto' picked, if it was 'auto')."""
        return self._kind

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def pinned_host_buffers(self) -> bool:
        """Whether observations and results are staged in pinned host memory (CUDA only)."""
        return self._pinned_in is not None and bool(self._pinned_in.is_pinned())

    @property
    def measurements(self) -> tuple[PathMeasurement, ...]:
        """What 'auto' measured at construction (empty if the path was configured)."""
        return self._measurements

    # -- inference --------------------------------------------------------------------
    def act(
        self, observations: np.ndarray, deterministic: bool | np.ndarray = False
    ) -> EngineOutput:
        """Actions within the bundle's bounds and their log-probs for raw observations."""
        n = self._check_observations(observations)
        det = self._check_deterministic(deterministic, n)
        path, version = self._live  # read once: this whole batch uses this version
        with self._lock, torch.inference_mode():
            actions, log_probs = self.run(path, observations, det)
        return EngineOutput(actions, log_probs, version)

    @property
    def threads(self) -> int:
        """torch intra-op threads every forward of this engine runs with."""
        return self._threads

    @contextmanager
    def _own_threads(self) -> Iterator[None]:
        """Run the block at the engine's thread count, then give the caller's back."""
        before = torch.get_num_threads()
        if before == self._threads:
            yield
            return
        torch.set_num_threads(self._threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def run(
        self, path: ForwardPath, observations: np.ndarray, deterministic: np.ndarray | bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """One unchecked pass of ``observations`` through ``path`` (callers hold the lock)."""
        n = observations.shape[0]
        x = np.zeros((_padded(n, self._config.row_block), self.obs_dim), dtype=np.float32)
        self._normalize(observations, out=x[:n])
        with self._own_threads():
            mu, log_std = path(self._to_device(x))
        mu_np, log_std_np = self._to_host(mu, log_std)
        noise: np.ndarray | None = None
        if not (isinstance(deterministic, bool) and deterministic):
            noise = torch.randn((n, self.act_dim), generator=self._generator).numpy()
            if not isinstance(deterministic, bool):
                noise[deterministic] = 0.0
        actions, log_probs = squash(
            mu_np, log_std_np, noise, n, self._low, self._half_range, self._high
        )
        if self._frame is not None:
            actions = self._frame.actions(observations, actions)
        return actions, log_probs

    def swap_weights(self, version: VersionInfo, actor_state: StateDict) -> None:
        """Serve ``actor_state`` as ``version`` from the next ``act()``; validated first."""
        try:
            check_state(
                actor_state, actor_parameter_shapes(self._arch), f"weights of version {version.id}"
            )
        except BundleTensorError as exc:
            raise WeightSwapError(str(exc)) from exc
        found = state_sha256(actor_state)
        if found != version.weights_sha256:
            raise WeightSwapError(
                f"weights of version {version.id} ({version.name!r}) hash to {found} but the "
                f"version names {version.weights_sha256}; build the VersionInfo with "
                "tether.policy.state_sha256(actor_state)"
            )
        cpu_state = {k: v.detach().to("cpu", copy=True) for k, v in actor_state.items()}
        path = self.build_path(self._kind, cpu_state)
        self._live = (path, version)  # one assignment: readers see old or new pair, never a mix

    def build_path(self, kind: PathKind, actor_state: StateDict) -> ForwardPath:
        """An execution path for ``actor_state``, already run a few times.

        The warm-up happens here, in the caller's thread (the one swapping weights), so the
        first served batch after a swap does not pay for allocation or TorchScript's
        profiling runs.
        """
        if self._device.type == "cpu" and kind in ("eager", "jit"):
            require_pinned_blas(kind)
        path = build_path(
            kind,
            self._arch,
            actor_state,
            row_block=self._config.row_block,
            device=self._device,
            num_threads=self._threads,
        )
        block = torch.zeros((self._config.row_block, self.obs_dim), device=self._device)
        with torch.inference_mode(), self._own_threads():
            for _ in range(_WARMUP_CALLS):
                path(block)
        return path

    # -- helpers ----------------------------------------------------------------------
    def _check_observations(self, obs: object) -> int:
        if not isinstance(obs, np.ndarray):
            raise ObservationError(
                f"observations must be a numpy array of shape (B, {self.obs_dim}), got {type(obs).__name__}"
            )
        if obs.ndim != 2 or obs.shape[1] != self.obs_dim:
            raise ObservationError(
                f"observations must have shape (B, {self.obs_dim}), got {obs.shape}; "
                "add a batch axis with obs[None] for one row"
            )
        n = obs.shape[0]
        if not 1 <= n <= self._config.max_batch_size:
            raise ObservationError(
                f"observations must have between 1 and {self._config.max_batch_size} rows "
                f"(max_batch_size), got {n}"
            )
        if obs.dtype != np.float32:
            raise ObservationError(
                f"observations must be float32, got {obs.dtype}; convert with .astype(np.float32)"
            )
        finite = np.isfinite(obs)
        if not finite.all():
            rows = sorted({int(r) for r in np.nonzero(~finite)[0]})
            raise ObservationError(f"observations must be finite; rows {rows[:10]} hold NaN or Inf")
        return int(n)

    @staticmethod
    def _check_deterministic(det: object, n: int) -> np.ndarray | bool:
        if isinstance(det, bool | np.bool_):
            return bool(det)
        if isinstance(det, np.ndarray) and det.dtype == np.bool_ and det.shape == (n,):
            return np.ascontiguousarray(det)
        shown = det.shape if isinstance(det, np.ndarray) else type(det).__name__
        dtype = det.dtype if isinstance(det, np.ndarray) else ""
        raise ObservationError(
            f"deterministic must be a bool or a bool array of shape ({n},), got {shown} {dtype}"
        )

    def _to_device(self, x: np.ndarray) -> torch.Tensor:
        host = torch.from_numpy(x)
        if self._pinned_in is None:
            return host
        staging = self._pinned_in[: host.shape[0]]
        staging.copy_(host)
        return staging.to(self._device, non_blocking=True)

    def _to_host(self, mu: torch.Tensor, log_std: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        if self._pinned_out is None:
            return mu.numpy(), log_std.numpy()
        rows, act = mu.shape
        out = self._pinned_out[:rows]
        out[:, :act].copy_(mu, non_blocking=True)
        out[:, act:].copy_(log_std, non_blocking=True)
        torch.cuda.current_stream(self._device).synchronize()
        host = out.numpy()
        return host[:, :act], host[:, act:]


def _padded(n: int, block: int) -> int:
    return -(-n // block) * block


def _resolve_device(name: str) -> torch.device:
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise EngineConfigError(
                f"device {name!r} requested but torch sees no CUDA device "
                f"(torch {torch.__version__}); use device='cpu'"
            )
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise EngineConfigError(
                f"device {name!r} requested but only {torch.cuda.device_count()} CUDA devices exist"
            )
    return device
