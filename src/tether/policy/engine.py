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
  calls it, and numpy's BLAS runs with at most that many threads (process-wide). torch keeps that count per thread and a fresh thread starts at one per core:
  a shadow or evaluation thread running a candidate with two OpenMP threads on a core the
  server shares with its robots spun that core and made the robots' replies miss their
  control deadlines. The count also fixes the padding of the exact activation
  (``paths.py``), so it is part of the numerics, not only of the speed.

A bundle with named inputs and an action horizon ``H > 1`` (a ``cnn_chunk_gaussian``
actor) takes ``act({name: (B, *shape)})``, every input of the manifest by name, and
returns ``(B, H, act_dim)`` actions; its network runs eagerly, in blocks of exactly
``row_block`` rows like the MLP paths, so a row's chunk does not depend on its batch
either. With an action frame, step ``k`` of a chunk steps from step ``k - 1``'s command
(:meth:`CommandStepFrame.chunk_actions`). A vector bundle (one input, ``H = 1``) is
served exactly as before: ``act(array)``, ``(B, act_dim)`` actions.

On CPU an ``mlp_gaussian`` bundle can run ``execution="compiled"``: normalization, goal
shift, forward, squash, scaling and frame in one numba call per batch
(:mod:`tether.policy.kernel`), with no torch and no BLAS on the way; ``auto`` measures
it beside the others where numba is installed.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import NamedTuple, TypeAlias

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from tether.policy import kernel
from tether.policy.bundle import PolicyBundle
from tether.policy.config import EngineConfig
from tether.policy.errors import (
    BundleTensorError,
    EngineConfigError,
    ObservationError,
    WeightSwapError,
)
from tether.policy.goal_shift import GoalShiftStage, split_goal_state
from tether.policy.manifest import InputSpec, VersionInfo
from tether.policy.networks import ActorArchitecture, ChunkActor, actor_parameter_shapes
from tether.policy.numerics import require_pinned_blas
from tether.policy.paths import CompiledPath, ForwardPath, PathKind, RowStages, build_path
from tether.policy.selection import PathMeasurement, choose_path
from tether.policy.squash import squash
from tether.policy.tensors import StateDict, check_state, state_sha256
from tether.policy.transforms import ObservationNormalizer, action_arrays

_WARMUP_CALLS = 3  # TorchScript's profiling executor optimizes after its second run


class GoalShiftedPath:
    """An execution path whose observations first get the version's goal shift.

    ``goal`` shifts the host block in place (the engine calls it before moving the block
    to the device); calling the path runs the actor on the block as it is.
    """

    def __init__(self, goal: GoalShiftStage, path: ForwardPath) -> None:
        self.goal = goal
        self.path = path
        self.kind: PathKind = path.kind

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.path(x)


class EngineOutput(NamedTuple):
    """One batch's result; every row was computed with ``version``."""

    actions: np.ndarray  # (B, act_dim), or (B, H, act_dim) for H > 1: float32, in bounds
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
        _limit_numpy_blas(self._threads)
        m = bundle.manifest
        self._normalize = ObservationNormalizer(m.normalizer)
        self._low, self._half_range, self._high = action_arrays(m.action)
        self._frame = m.action.frame
        self._inputs = m.input_specs
        self._chunked = self._arch.kind != "mlp_gaussian"
        # squash() bounds every output of the head: a chunk's are H copies of one step's.
        reps = self._arch.horizon
        self._squash_bounds = tuple(
            np.tile(a, reps) for a in (self._low, self._half_range, self._high)
        )
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
            self._pinned_out = torch.empty((padded_max, 2 * self._arch.out_dim), pin_memory=True)
        self._measurements: tuple[PathMeasurement, ...] = ()
        kind: PathKind
        if self._chunked:
            if cfg.execution not in ("auto", "eager"):
                raise EngineConfigError(
                    f"execution {cfg.execution!r} serves vector 'mlp_gaussian' bundles only; a "
                    f"{self._arch.kind!r} bundle runs 'eager' (or 'auto')"
                )
            kind = "eager"
        elif cfg.execution == "auto":
            kind, self._measurements = choose_path(self, bundle.actor_state)
        else:
            kind = cfg.execution
            if self._device.type != "cpu" and kind in ("int8", "numpy", "compiled"):
                raise EngineConfigError(
                    f"execution {kind!r} runs on cpu only, but device is {cfg.device!r}; "
                    "use 'eager' or 'jit' on cuda"
                )
            if kind == "compiled" and not kernel.AVAILABLE:
                raise EngineConfigError(
                    "execution 'compiled' needs numba, which is not importable here (or "
                    "TETHER_POLICY_COMPILED=0 turned it off); install numba or use 'numpy'"
                )
        self._kind: PathKind = kind
        self._live: tuple[ServedPath, VersionInfo] = (
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
    def horizon(self) -> int:
        """Actions per call: each row's chunk has this many steps."""
        return self._arch.horizon

    @property
    def input_specs(self) -> tuple[InputSpec, ...]:
        """Every named input ``act`` takes, the state vector first."""
        return self._inputs

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
        self,
        observations: np.ndarray | Mapping[str, np.ndarray],
        deterministic: bool | np.ndarray = False,
    ) -> EngineOutput:
        """Actions within the bundle's bounds and their log-probs for raw observations.

        ``observations`` is the ``(B, obs_dim)`` state batch of a one-input bundle, or a
        mapping with every named input (``input_specs``) as a ``(B, *shape)`` batch.
        """
        raw_state, images = self._split_inputs(observations)
        n = self._check_observations(raw_state)
        state: np.ndarray = raw_state  # type: ignore[assignment]  # checked just above
        self._check_images(images, n)
        det = self._check_deterministic(deterministic, n)
        path, version = self._live  # read once: this whole batch uses this version
        if isinstance(path, CompiledPath):  # no torch inside: no inference mode to enter
            with self._lock:
                actions, log_probs = self.run(path, state, det)
        else:
            with self._lock, torch.inference_mode():
                actions, log_probs = self.run(path, state, det, images)
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
        self,
        path: ServedPath,
        observations: np.ndarray,
        deterministic: np.ndarray | bool,
        images: Sequence[np.ndarray] = (),
    ) -> tuple[np.ndarray, np.ndarray]:
        """One unchecked pass of ``observations`` (and a chunk actor's ``images``, in
        input order) through ``path`` (callers hold the lock)."""
        n = observations.shape[0]
        if isinstance(path, CompiledPath):  # the whole row, frame included, in one call
            return path.act(observations, self._noise(n, deterministic))
        padded = _padded(n, self._config.row_block)
        x = np.zeros((padded, self.obs_dim), dtype=np.float32)
        self._normalize(observations, out=x[:n])
        with self._own_threads():
            if isinstance(path, ChunkPath):
                mu, log_std = path(
                    self._to_device(x), [self._image_block(im, padded) for im in images]
                )
            else:
                if isinstance(path, GoalShiftedPath):
                    path.goal(x)  # the goal the actor reads, on the host (goal_shift.py)
                mu, log_std = path(self._to_device(x))
        mu_np, log_std_np = self._to_host(mu, log_std)
        noise = self._noise(n, deterministic)
        actions, log_probs = squash(mu_np, log_std_np, noise, n, *self._squash_bounds)
        if not self._chunked:
            if self._frame is not None:
                actions = self._frame.actions(observations, actions)
            return actions, log_probs
        chunk = actions.reshape(n, self._arch.horizon, self.act_dim)
        if self._frame is not None:
            chunk = self._frame.chunk_actions(observations, chunk)
        return chunk, log_probs

    def _noise(self, n: int, deterministic: np.ndarray | bool) -> np.ndarray | None:
        """Standard normal ``(n, out_dim)`` from the engine's generator, zero on the
        deterministic rows; ``None`` when every row is deterministic."""
        if isinstance(deterministic, bool) and deterministic:
            return None
        noise: np.ndarray = torch.randn((n, self._arch.out_dim), generator=self._generator).numpy()
        if not isinstance(deterministic, bool):
            noise[deterministic] = 0.0
        return noise

    def _image_block(self, images: np.ndarray, padded: int) -> torch.Tensor:
        """uint8 ``(n, H, W, C)`` images as float ``(padded, C, H, W)`` in [0, 1]."""
        n, h, w, c = images.shape
        block = np.zeros((padded, c, h, w), dtype=np.float32)
        np.multiply(images.transpose(0, 3, 1, 2), np.float32(1.0 / 255.0), out=block[:n])
        return torch.from_numpy(block).to(self._device)

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

    def build_path(self, kind: PathKind, actor_state: StateDict) -> ServedPath:
        """An execution path for ``actor_state``, already run a few times.

        The warm-up happens here, in the caller's thread (the one swapping weights), so the
        first served batch after a swap does not pay for allocation, TorchScript's
        profiling runs or numba's compilation (or loading it from numba's cache).
        """
        if self._device.type == "cpu" and kind in ("eager", "jit"):
            require_pinned_blas(kind)
        if self._chunked:
            chunk_path = ChunkPath(self._arch, actor_state, self._config.row_block, self._device)
            zeros = np.zeros((self._config.row_block, self.obs_dim), dtype=np.float32)
            images = [np.zeros((1, *t.shape), dtype=np.uint8) for t in self._inputs[1:]]
            with torch.inference_mode(), self._own_threads():
                for _ in range(_WARMUP_CALLS):
                    chunk_path(
                        torch.from_numpy(zeros).to(self._device),
                        [self._image_block(im, self._config.row_block) for im in images],
                    )
            return chunk_path
        shift = self._arch.goal_shift
        base_state, goal_state = split_goal_state(actor_state)
        built = build_path(
            kind,
            self._arch.without_goal_shift(),
            base_state,
            row_block=self._config.row_block,
            device=self._device,
            num_threads=self._threads,
            stages=RowStages(
                self._normalize,
                self._low,
                self._half_range,
                self._high,
                goal_shift=None if shift is None else (shift, goal_state),
                frame=self._frame,
            ),
        )
        kernel.warm()  # act() checks observations with kernel.all_within on every path
        if isinstance(built, CompiledPath):
            zeros = np.zeros((self._config.row_block, self.obs_dim), dtype=np.float32)
            for _ in range(_WARMUP_CALLS):
                built.act(zeros, None)
            return built
        path: ForwardPath | GoalShiftedPath = built
        if shift is not None:
            path = GoalShiftedPath(GoalShiftStage(shift, goal_state, self._config.row_block), path)
        block = torch.zeros((self._config.row_block, self.obs_dim), device=self._device)
        with torch.inference_mode(), self._own_threads():
            for _ in range(_WARMUP_CALLS):
                path(block)
        return path

    # -- helpers ----------------------------------------------------------------------
    def _split_inputs(
        self, observations: np.ndarray | Mapping[str, np.ndarray]
    ) -> tuple[object, list[np.ndarray]]:
        """The state batch and the image batches (input order) of ``observations``."""
        if not isinstance(observations, Mapping):
            if len(self._inputs) > 1:
                names = [t.name for t in self._inputs]
                raise ObservationError(
                    f"this policy takes named inputs {names}; pass a mapping of each to its "
                    "(B, *shape) batch"
                )
            return observations, []
        names = [t.name for t in self._inputs]
        missing = [k for k in names if k not in observations]
        extra = sorted(k for k in observations if k not in names)
        if missing or extra:
            raise ObservationError(
                f"inputs must be exactly {names}; missing {missing}, unexpected {extra}"
            )
        return observations[names[0]], [observations[k] for k in names[1:]]

    def _check_images(self, images: list[np.ndarray], n: int) -> None:
        for spec, array in zip(self._inputs[1:], images, strict=True):
            want = (n, *spec.shape)
            if not isinstance(array, np.ndarray) or array.dtype != np.uint8:
                found = array.dtype if isinstance(array, np.ndarray) else type(array).__name__
                raise ObservationError(f"input {spec.name!r} must be uint8, got {found}")
            if array.shape != want:
                raise ObservationError(
                    f"input {spec.name!r} must have shape {want} (one image per state row), "
                    f"got {array.shape}"
                )

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
        if not kernel.all_within(obs, math.inf):
            rows = sorted({int(r) for r in np.nonzero(~np.isfinite(obs))[0]})
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


class ChunkPath:
    """A :class:`ChunkActor`'s forward on blocks of exactly ``row_block`` rows.

    Convolution and GEMM kernels are chosen by shape, so, as the MLP paths do
    (:mod:`tether.policy.paths`), every block the network sees has the same row count
    whatever the batch: a row's result does not depend on the other rows.
    """

    kind: PathKind = "eager"

    def __init__(
        self, arch: ActorArchitecture, state: StateDict, row_block: int, device: torch.device
    ) -> None:
        actor = ChunkActor(arch)
        actor.load_state_dict({k: v.detach().to("cpu") for k, v in state.items()})
        self._actor = actor.eval().requires_grad_(False).to(device)
        self._row_block = row_block

    def __call__(
        self, x: torch.Tensor, images: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b = self._row_block
        mus: list[torch.Tensor] = []
        log_stds: list[torch.Tensor] = []
        for start in range(0, x.shape[0], b):
            mu, log_std = self._actor(
                x[start : start + b], [im[start : start + b] for im in images]
            )
            mus.append(mu)
            log_stds.append(log_std)
        return torch.cat(mus), torch.cat(log_stds)


# What ``act`` runs: a forward path (the engine squashes around it), a chunk actor's, or
# the compiled path that does the whole row itself.
ServedPath: TypeAlias = ForwardPath | GoalShiftedPath | ChunkPath | CompiledPath


def _limit_numpy_blas(threads: int) -> None:
    """Run numpy's BLAS (the ``numpy`` path's matmuls) with at most ``threads`` threads.

    Its OpenBLAS starts one thread per core, and those threads spin between the tiny
    GEMMs of a forward: on a 2-core machine shared with other processes a preempted BLAS
    thread held each forward for milliseconds (the 'numpy' path measured 12 ms per
    step where it takes ~20 µs; docs/benchmarks.md). BLAS keeps one count per process,
    so this sets it for the process, once per engine, with no environment variable.
    """
    threadpool_limits(limits=threads, user_api="blas")


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
