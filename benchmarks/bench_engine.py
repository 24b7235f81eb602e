"""PolicyEngine latency per execution path, beside a plain numpy forward of the same network.

Times ``engine.act(obs, deterministic=True)`` (validation, normalization, forward,
squash, scaling, the bundle's frame, copies out) at batch 1, 8 and 64 for every execution
path (``compiled`` included where numba imports), plus two references measured in the
same rounds: a plain numpy forward (normalize, three matmuls, tanh, scale: no
validation, no log-prob, no frame) and the plain ``Actor`` module in torch (one GEMM per
batch, so not batch-invariant). Calls are interleaved round-robin so every path sees the
same machine noise (and each call finds the other paths' weights in the cache); a second
table times hot loops (one path called back to back). The policy is the shipped position arm policy (22 -> 256 -> 256 ->
2 x 4, relu, command-step frame) or, with ``--policy random``, a fresh (``--hidden``)
actor for the torque arm. Also reports each path's largest action difference from eager
on 256 rows, and a summary: per action at batch 1, per row at batch 64, each against
the plain numpy forward.

    python benchmarks/bench_engine.py [--rounds 400] [--threads 1] [--policy shipped|random]
        [--loops 200] [--repeats 7]
"""

from __future__ import annotations

import os

# numpy's BLAS would otherwise spread the plain forward (and the numpy path) over every
# core while torch runs on --threads; pin it before numpy loads so the floor is fair.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import platform
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch

from tether.assets import load_pretrained_bundle
from tether.policy import EngineConfig, PolicyBundle, PolicyEngine, init_bundle, kernel
from tether.policy.paths import PATH_KINDS
from tether.policy.selection import probe_observations
from tether.policy.transforms import action_arrays, normalizer_arrays
from tether.sim import arm_spec

BATCHES = (1, 8, 64)


def numpy_forward(bundle: PolicyBundle) -> Callable[[np.ndarray], np.ndarray]:
    """The textbook deterministic forward in numpy float32: the floor to compare against."""
    m = bundle.manifest
    mean, inv_std = normalizer_arrays(m.normalizer)
    low, half, _ = action_arrays(m.action)
    clip = np.float32(m.normalizer.clip)
    s = bundle.actor_state
    layers = [
        (s[f"trunk.{2 * i}.weight"].numpy().T.copy(), s[f"trunk.{2 * i}.bias"].numpy())
        for i in range(len(m.architecture.hidden_sizes))
    ]
    w_mu, b_mu = s["head.mu.weight"].numpy().T.copy(), s["head.mu.bias"].numpy()

    def forward(obs: np.ndarray) -> np.ndarray:
        h = np.clip((obs - mean) * inv_std, -clip, clip)
        for w, b in layers:
            h = np.maximum(h @ w + b, 0.0)
        return low + (np.tanh(h @ w_mu + b_mu) + 1.0) * half

    return forward


def torch_actor(bundle: PolicyBundle) -> Callable[[np.ndarray], np.ndarray]:
    """The plain Actor module (one GEMM of B rows), normalization and scaling around it."""
    m = bundle.manifest
    mean, inv_std = (torch.from_numpy(a) for a in normalizer_arrays(m.normalizer))
    low, half, _ = (torch.from_numpy(a) for a in action_arrays(m.action))
    actor = bundle.build_actor()

    def forward(obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            x = torch.clamp((torch.from_numpy(obs) - mean) * inv_std, -10.0, 10.0)
            mu, _ = actor(x)
            return (low + (torch.tanh(mu) + 1.0) * half).numpy()

    return forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400, help="timed calls per path and batch")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--hidden", default="256,256", help="hidden sizes of --policy random")
    parser.add_argument("--policy", choices=("shipped", "random"), default="shipped")
    parser.add_argument("--loops", type=int, default=200, help="calls per hot loop")
    parser.add_argument("--repeats", type=int, default=7, help="hot loops per path and batch")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.policy == "shipped":
        bundle = load_pretrained_bundle(command_interface="position")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            hidden_sizes = tuple(int(h) for h in args.hidden.split(","))
            bundle = init_bundle(f"{tmp}/b", arm_spec(), hidden_sizes=hidden_sizes, seed=0)
    hidden = bundle.architecture.hidden_sizes
    kinds = [k for k in PATH_KINDS if k != "compiled" or kernel.AVAILABLE]
    engines = {
        k: PolicyEngine(bundle, EngineConfig(execution=k, num_threads=args.threads)) for k in kinds
    }
    probe = probe_observations(bundle.manifest.normalizer, rows=256, seed=1)
    reference = engines["eager"].act(probe, True).actions
    diffs = {
        k: float(np.max(np.abs(e.act(probe, True).actions - reference))) for k, e in engines.items()
    }
    calls: dict[str, Callable[[np.ndarray], object]] = {
        f"engine {k}": (lambda o, e=e: e.act(o, True)) for k, e in engines.items()
    }
    calls["plain numpy forward"] = numpy_forward(bundle)
    calls["plain torch Actor"] = torch_actor(bundle)
    diffs["plain numpy forward"] = float(
        np.max(np.abs(calls["plain numpy forward"](probe) - reference))
    )
    diffs["plain torch Actor"] = float(
        np.max(np.abs(calls["plain torch Actor"](probe) - reference))
    )
    obs = {b: probe[:b].copy() for b in BATCHES}
    times: dict[tuple[str, int], list[float]] = {(n, b): [] for n in calls for b in BATCHES}
    for fn in calls.values():  # warm-up
        for b in BATCHES:
            for _ in range(20):
                fn(obs[b])
    for _ in range(args.rounds):
        for b in BATCHES:
            for name, fn in calls.items():
                t0 = time.perf_counter()
                fn(obs[b])
                times[(name, b)].append(time.perf_counter() - t0)
    arch = bundle.architecture
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(
        f"machine: {platform.machine()}, nproc {os.cpu_count()}, load {load}, python "
        f"{platform.python_version()}, torch {torch.__version__}, numpy {np.__version__}, "
        f"threads {args.threads}; policy {args.policy}: obs {arch.obs_dim}, act {arch.act_dim}, "
        f"hidden {hidden}, {arch.activation}, frame {bundle.manifest.action.frame is not None}; "
        f"{args.rounds} rounds"
    )
    print()
    header = " | ".join(f"batch {b} median / p99 (µs)" for b in BATCHES)
    print(f"| path | {header} | max action diff from eager |")
    print("|---|" + "---|" * len(BATCHES) + "---|")
    for name in calls:
        cells = []
        for b in BATCHES:
            t = sorted(times[(name, b)])
            p99 = t[min(len(t) - 1, int(0.99 * len(t)))]
            cells.append(f"{statistics.median(t) * 1e6:.1f} / {p99 * 1e6:.1f}")
        key = name.removeprefix("engine ")
        print(f"| {name} | " + " | ".join(cells) + f" | {diffs[key]:.2e} |")
    floor = {b: statistics.median(times[("plain numpy forward", b)]) for b in BATCHES}
    print()
    for name in calls:
        ratios = ", ".join(
            f"b{b} {statistics.median(times[(name, b)]) / floor[b]:.2f}x" for b in BATCHES
        )
        print(f"{name}: {ratios} of the plain numpy forward")
    print()
    print(
        "| path | batch 1, µs per action | × plain numpy | batch 64, µs per row | × plain numpy |"
    )
    print("|---|---|---|---|---|")
    for name in calls:
        one = statistics.median(times[(name, 1)]) * 1e6
        row = statistics.median(times[(name, 64)]) * 1e6 / 64
        print(
            f"| {name} | {one:.1f} | {one / (floor[1] * 1e6):.2f} | {row:.2f} | "
            f"{row / (floor[64] * 1e6 / 64):.2f} |"
        )
    hot = _hot_loops(calls, obs, args.loops, args.repeats)
    print(
        f"\nHot loops ({args.loops} consecutive calls of one path, its weights in cache; the "
        f"median of {args.repeats} repeats, paths alternating):\n"
    )
    print(
        "| path | batch 1, µs per action | × plain numpy | batch 64, µs per row | × plain numpy |"
    )
    print("|---|---|---|---|---|")
    for name in calls:
        one, row = hot[(name, 1)], hot[(name, 64)] / 64
        print(
            f"| {name} | {one:.1f} | {one / hot[('plain numpy forward', 1)]:.2f} | {row:.2f} | "
            f"{row / (hot[('plain numpy forward', 64)] / 64):.2f} |"
        )
    auto = PolicyEngine(bundle, EngineConfig(num_threads=args.threads))
    print(f"\n'auto' picks: {auto.execution}")


def _hot_loops(
    calls: dict[str, Callable[[np.ndarray], object]],
    obs: dict[int, np.ndarray],
    loops: int,
    repeats: int,
) -> dict[tuple[str, int], float]:
    """Median µs per call of ``loops`` back-to-back calls, per path and batch (1 and 64)."""
    samples: dict[tuple[str, int], list[float]] = {(n, b): [] for n in calls for b in (1, 64)}
    for _ in range(repeats):
        for b in (1, 64):
            for name, fn in calls.items():
                t0 = time.perf_counter()
                for _ in range(loops):
                    fn(obs[b])
                samples[(name, b)].append((time.perf_counter() - t0) / loops * 1e6)
    return {k: statistics.median(v) for k, v in samples.items()}


if __name__ == "__main__":
    main()
