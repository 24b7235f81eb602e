"""Checks PolicyEngine on CUDA against the CPU engine, and times both; exits cleanly without a GPU.

Checks (exit status 1 if any fails): for the 'eager' and 'jit' paths on CUDA, actions
within ``--tolerance`` of the CPU eager engine on 256 probe rows; batch 1 and batch 64
bit-identical per row on the GPU; observations staged through pinned host memory.
Then prints act() latency at several batch sizes, CUDA beside CPU, measured in one run.

    python benchmarks/cuda_engine_check.py [--rounds 200] [--row-block 8]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

from tether.policy import EngineConfig, PolicyEngine, init_bundle
from tether.policy.selection import probe_observations
from tether.sim import arm_spec

BATCHES = (1, 8, 64, 1024)


def _median_us(engine: PolicyEngine, obs: np.ndarray, rounds: int) -> float:
    for _ in range(10):
        engine.act(obs, True)
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        engine.act(obs, True)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="timed calls per batch size")
    parser.add_argument("--row-block", type=int, default=8, help="EngineConfig.row_block (rows)")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="max action diff vs CPU")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(f"no CUDA device visible to torch {torch.__version__}: nothing to check (ok)")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False  # compare float32 with float32
    print(
        f"{torch.cuda.get_device_name(0)}; torch {torch.__version__}, python "
        f"{platform.python_version()}, row_block {args.row_block}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        bundle = init_bundle(f"{tmp}/b", arm_spec(), hidden_sizes=(256, 256), seed=0)
    cfg = {"max_batch_size": max(BATCHES), "row_block": args.row_block}
    cpu = PolicyEngine(bundle, EngineConfig(execution="eager", **cfg))
    probe = probe_observations(bundle.manifest.normalizer, rows=256, seed=1)
    reference = cpu.act(probe, True).actions
    failures: list[str] = []
    gpus = {}
    for kind in ("eager", "jit"):
        gpu = PolicyEngine(bundle, EngineConfig(execution=kind, device="cuda", **cfg))
        gpus[kind] = gpu
        out = gpu.act(probe, True)
        diff = float(np.max(np.abs(out.actions - reference)))
        ok = diff <= args.tolerance
        print(f"[{'ok' if ok else 'FAIL'}] cuda {kind}: max action diff from cpu eager {diff:.3g}")
        if not ok:
            failures.append(f"cuda {kind} differs from cpu by {diff:.3g}")
        full = gpu.act(probe[:64], True).actions
        singles = np.concatenate([gpu.act(probe[i : i + 1], True).actions for i in range(64)])
        same = bool(np.array_equal(full, singles))
        print(f"[{'ok' if same else 'FAIL'}] cuda {kind}: batch 1 and batch 64 bit-identical")
        if not same:
            failures.append(f"cuda {kind} is not batch-invariant")
        pinned = gpu.pinned_host_buffers
        print(f"[{'ok' if pinned else 'FAIL'}] cuda {kind}: observations staged in pinned memory")
        if not pinned:
            failures.append(f"cuda {kind} does not use pinned host buffers")
    print("\n| batch | cpu eager (µs) | cuda eager (µs) | cuda jit (µs) |")
    print("|---|---|---|---|")
    for b in BATCHES:
        obs = np.resize(probe, (b, probe.shape[1])).astype(np.float32)
        row = [_median_us(e, obs, args.rounds) for e in (cpu, gpus["eager"], gpus["jit"])]
        print(f"| {b} | " + " | ".join(f"{us:.1f}" for us in row) + " |")
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
