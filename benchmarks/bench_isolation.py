"""Learning never starves control: serving p99 with the learner at full speed vs idle.

One server process (this one, pinned to the serving cores) serves the shipped pretrained
arm policy; a separate client process runs ``--robots`` Control sessions at the arm's
50 Hz control rate and records every round trip. Phases alternate learner-idle and
learner-at-full-speed (a real learner process, pinned to its own cores by
``learner_placement()``, updating as fast as it can), so both conditions see the same
machine noise; the ratio of their p99s is the figure (design invariant 3, target <= 1.3).

    python benchmarks/bench_isolation.py [--robots 4] [--phase-s 20] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_learning import start_full_speed_learner

from tether.assets import load_pretrained_bundle, pretrained_bundle_path
from tether.learning.placement import learner_placement
from tether.serving.client import PolicyClient
from tether.serving.config import AdmissionConfig, ServerConfig
from tether.serving.launch import build_server
from tether.sim import arm_spec


def _robot(address: str, seconds: float, seed: int, out: list[float]) -> None:
    spec = arm_spec()
    rng = np.random.default_rng(seed)
    low = np.array([-1.0] * spec.obs_dim, np.float32)
    with PolicyClient(address) as client:
        session = client.session(spec, robot_id=f"bench-{seed}", control_deadline_s=1.0)
        period = spec.control_period_s
        end = time.monotonic() + seconds
        next_tick = time.monotonic()
        while time.monotonic() < end:
            obs = low + rng.uniform(0.0, 2.0, spec.obs_dim).astype(np.float32) * 0.3
            sent = time.perf_counter()
            session.step(obs, reward=0.0, deterministic=True)
            out.append((time.perf_counter() - sent) * 1e3)
            next_tick += period
            delay = next_tick - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        session.close()


def _clients(address: str, robots: int, seconds: float, path: str) -> None:
    """Client process: ``robots`` threads, each one robot; latencies (ms) saved to ``path``."""
    results: list[list[float]] = [[] for _ in range(robots)]
    threads = [
        threading.Thread(target=_robot, args=(address, seconds, i, results[i]))
        for i in range(robots)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.save(path, np.concatenate([np.asarray(r) for r in results]))


def _phase(address: str, robots: int, seconds: float, tmp: Path, name: str) -> np.ndarray:
    path = str(tmp / f"{name}.npy")
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=_clients, args=(address, robots, seconds, path))
    proc.start()
    proc.join()
    return np.load(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--robots", type=int, default=4)
    ap.add_argument("--phase-s", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    all_cores = os.sched_getaffinity(0)
    placement = learner_placement()
    bundle = load_pretrained_bundle()
    # Affinity is per thread on Linux and inherited by threads and processes made later:
    # narrow this thread before the server's threads and the client process exist.
    os.sched_setaffinity(0, placement.serving_cores)
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        config = ServerConfig(port=0, metrics_port=None, admission=AdmissionConfig(rate_limit_hz=0))
        loop = asyncio.new_event_loop()
        server = build_server(pretrained_bundle_path(), config)
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(30)
        idle: list[np.ndarray] = []
        busy: list[np.ndarray] = []
        learner_rates: list[float] = []
        try:
            for r in range(args.rounds):
                idle.append(_phase(server.address, args.robots, args.phase_s, tmp, f"idle{r}"))
                # The learner's cores are chosen from the caller's affinity: widen it for
                # the moment the learner is made, as tether run does before pinning.
                os.sched_setaffinity(0, all_cores)
                learner, channel, weights = start_full_speed_learner(bundle, tmp / f"l{r}")
                os.sched_setaffinity(0, placement.serving_cores)
                try:
                    while learner.counters().updates == 0:
                        time.sleep(0.1)
                    first = learner.counters().updates
                    start = time.monotonic()
                    busy.append(_phase(server.address, args.robots, args.phase_s, tmp, f"busy{r}"))
                    learner_rates.append(
                        (learner.counters().updates - first) / (time.monotonic() - start)
                    )
                finally:
                    learner.stop()
                    channel.close()
                    weights.close()
        finally:
            asyncio.run_coroutine_threadsafe(server.stop(1.0), loop).result(30)
            loop.call_soon_threadsafe(loop.stop)
    a, b = np.concatenate(idle), np.concatenate(busy)
    print(
        f"cores: serving {placement.serving_cores}, learner {placement.learner_cores}; "
        f"{args.robots} robots at 50 Hz, {args.rounds} x {args.phase_s:.0f} s per condition"
    )
    for name, lat in (("learner idle", a), ("learner full speed", b)):
        p50, p99 = np.percentile(lat, [50, 99])
        print(f"{name:>20}: {lat.size} round trips, p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    ratio = float(np.percentile(b, 99) / np.percentile(a, 99))
    print(f"learner at {np.mean(learner_rates):.0f} updates/s; p99 ratio busy/idle = {ratio:.2f}")


if __name__ == "__main__":
    main()
