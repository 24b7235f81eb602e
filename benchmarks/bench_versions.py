"""What policy versioning costs: routing per step, a live swap, the shadow hand-off, gate stages.

Measured side by side in one run, beside one batch-1 ``engine.act`` of the same (256, 256)
actor so every figure can be read as a share of an inference:

- ``route()`` per control step with no split, with an A/B split and with a canary share,
  and ``engine_for()`` (the per-batch read of the live engine);
- ``promote()`` (the live swap the next batch sees);
- ``ShadowRunner.offer()`` on the control path, and the shadow thread's work per step;
- the learner-side offline stage on 256 observations and one paired simulation episode.

    python benchmarks/bench_versions.py [--rounds 20000]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from tether.policy import EngineConfig, PolicyEngine, init_bundle
from tether.policy.bundle import save_derived_bundle
from tether.safety.limits import SafetyLimits
from tether.safety.supervisor import Supervisor
from tether.sim import ArmKinematics, arm_spec
from tether.versions.records import VersionSource, VersionState
from tether.versions.registry import ModelRegistry
from tether.versions.routing import TrafficRouter
from tether.versions.stages.offline import OfflineStageConfig, offline_stage
from tether.versions.stages.shadow import ShadowConfig, ShadowEvaluator, ShadowRunner
from tether.versions.stages.simulation import SimulationStageConfig, simulation_stage


def per_call_us(fn: Callable[[int], object], n: int) -> float:
    """Median over 5 repeats of the mean time per call, in microseconds."""
    samples = []
    for _ in range(5):
        start = time.perf_counter_ns()
        for i in range(n):
            fn(i)
        samples.append((time.perf_counter_ns() - start) / n / 1e3)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20000, help="calls per timed repeat")
    args = parser.parse_args()
    torch.set_num_threads(1)
    spec = arm_spec()
    tmp = Path(tempfile.mkdtemp())
    base = init_bundle(tmp / "v1", spec, seed=0)
    engines = [PolicyEngine(base, EngineConfig(execution="eager"))]
    for i in (2, 3):
        state = {k: v + 1e-3 * i if k == "head.mu.bias" else v for k, v in base.actor_state.items()}
        b = save_derived_bundle(
            tmp / f"v{i}", base, actor_state=state, version_id=i, version_name=f"v{i}"
        )
        engines.append(PolicyEngine(b, EngineConfig(execution="eager")))
    registry: ModelRegistry[PolicyEngine] = ModelRegistry()
    for e in engines:
        registry.register(e, source=VersionSource.BUNDLE)
    registry.promote(2, "bench")
    router = TrafficRouter(registry)
    rng = np.random.default_rng(0)
    obs1 = rng.uniform(-0.5, 0.5, (1, spec.obs_dim)).astype(np.float32)
    n = args.rounds

    act_us = per_call_us(lambda i: engines[1].act(obs1, deterministic=True), max(n // 20, 200))
    rows: list[tuple[str, float]] = [("engine.act, batch 1 (reference)", act_us)]
    rows.append(("engine_for(None) per batch", per_call_us(lambda i: registry.engine_for(None), n)))
    rows.append(("route(), no split", per_call_us(lambda i: router.route(f"s{i % 64}", "e"), n)))
    router.set_split({1: 1.0, 2: 1.0})
    rows.append(
        ("route(), A/B split (sticky)", per_call_us(lambda i: router.route(f"s{i % 64}", "e"), n))
    )
    router.set_split({})
    registry.transition(3, VersionState.CANARY, "bench")
    router.start_canary(3, 0.2, 0.8)
    rows.append(
        ("route(), canary share", per_call_us(lambda i: router.route("s", f"e{i}", f"t{i % 8}"), n))
    )
    router.stop_canary()
    flips = iter(range(10**9))
    rows.append(
        (
            "promote() (live swap)",
            per_call_us(lambda i: registry.promote(1 + next(flips) % 2, "b"), 2000),
        )
    )

    supervisor = Supervisor(SafetyLimits.from_spec(spec), kinematics=ArmKinematics())
    live_act = engines[0].act(obs1, deterministic=True).actions
    evaluator = ShadowEvaluator(
        engines[2], supervisor, baseline=1, config=ShadowConfig(steps=10**9, queue_batches=64)
    )
    rows.append(
        (
            "shadow work per step (its own thread)",
            per_call_us(lambda i: evaluator.observe(obs1, live_act), max(n // 20, 200)),
        )
    )
    runner = ShadowRunner(
        ShadowEvaluator(engines[2], supervisor, baseline=1, config=ShadowConfig(steps=10**9)),
        lambda v: None,
    )
    rows.append(
        (
            "shadow offer() on the control path",
            per_call_us(lambda i: runner.offer(obs1, live_act), n // 10),
        )
    )
    runner.stop()

    obs256 = rng.uniform(-0.5, 0.5, (256, spec.obs_dim)).astype(np.float32)
    start = time.perf_counter()
    offline_stage(engines[2].bundle, engines[0].bundle, obs256, OfflineStageConfig())
    offline_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    simulation_stage(
        engines[2],
        engines[0],
        SimulationStageConfig(episodes=1),
        randomization=None,
        supervisor=supervisor,
    )
    sim_ms = (time.perf_counter() - start) * 1e3

    print(
        f"machine: {platform.machine()}, {__import__('os').cpu_count()} cpus, python {platform.python_version()}, torch {torch.__version__}"
    )
    print(f"{'what':45s} {'us/call':>10s} {'x act':>8s}")
    for name, us in rows:
        print(f"{name:45s} {us:10.2f} {us / act_us:8.3f}")
    print(f"{'offline stage, 256 observations':45s} {offline_ms:10.1f} ms")
    print(f"{'simulation stage, 1 paired episode':45s} {sim_ms:10.1f} ms")


if __name__ == "__main__":
    main()
