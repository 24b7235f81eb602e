"""A chunk policy (state + one camera image in, H actions out) through the engine and
the chunk supervisor.

For the built-in arm, a ``cnn_chunk_gaussian`` bundle from ``init_bundle`` (one image
input, conv channels (8, 16), trunk (64, 64)) times ``engine.act({state, image},
deterministic=True)`` at batch 1, 8 and 64, and ``supervise_chunk`` of one row's chunk
with the arm's supervisor (H supervisor steps). Reports the median per call and per row.

    python benchmarks/bench_chunks.py [--rounds 200] [--side 64] [--horizon 8] [--threads 1]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch

from tether.policy import EngineConfig, PolicyEngine, init_bundle
from tether.safety.chunk import supervise_chunk
from tether.safety.for_spec import limits_for, supervisor_for
from tether.sim import arm_spec

BATCHES = (1, 8, 64)


def median_us(call: Callable[[], object], rounds: int) -> float:
    call()
    times = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        call()
        times.append((time.perf_counter_ns() - start) / 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--side", type=int, default=64, help="image height and width (px)")
    parser.add_argument("--horizon", type=int, default=8, help="actions per call")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    spec = arm_spec()
    shape = (args.side, args.side, 3)
    with tempfile.TemporaryDirectory() as tmp:
        bundle = init_bundle(
            f"{tmp}/chunk",
            spec,
            hidden_sizes=(64, 64),
            images=[("image", shape)],
            horizon=args.horizon,
            conv_channels=(8, 16),
            state_input="state",
        )
    engine = PolicyEngine(bundle, EngineConfig(num_threads=args.threads))
    rng = np.random.default_rng(0)
    print(
        f"chunk policy: image {list(shape)} uint8, H={args.horizon}, act_dim={spec.act_dim}, "
        f"torch {torch.__version__}, {args.threads} thread(s), {platform.processor() or platform.machine()}"
    )
    print(f"{'batch':>5} {'act() us':>10} {'us/row':>8}")
    for n in BATCHES:
        inputs = {
            "state": rng.uniform(-0.3, 0.3, (n, spec.obs_dim)).astype(np.float32),
            "image": rng.integers(0, 256, (n, *shape), dtype=np.uint8),
        }
        us = median_us(lambda inputs=inputs: engine.act(inputs, True), args.rounds)
        print(f"{n:>5} {us:>10.1f} {us / n:>8.1f}")
    state = rng.uniform(-0.3, 0.3, spec.obs_dim).astype(np.float32)
    chunk = engine.act({"state": state[None], "image": inputs["image"][:1]}, True).actions[0]
    supervisor = supervisor_for(spec, limits_for(spec))
    us = median_us(
        lambda: supervise_chunk(supervisor, state, chunk, step_period_s=spec.control_period_s),
        args.rounds,
    )
    print(f"supervise_chunk, H={args.horizon}: {us:.1f} us ({us / args.horizon:.1f} us/step)")


if __name__ == "__main__":
    main()
