"""How ``execution="auto"`` picks a path: measure each candidate at load, keep the fastest exact one.

Candidates run the engine's full pipeline (normalize, forward, squash, scale) on a fixed
probe drawn around the bundle's normalizer mean. A candidate is eligible only if its
deterministic actions stay within ``auto_tolerance`` of eager on that probe; among those,
the lowest median latency summed over batch 1 and batch 8 wins. Eager is always
eligible, so a choice always exists. The CPU-only paths (int8, numpy, compiled) are
candidates on CPU only, and compiled only where numba imports.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from tether.policy import kernel
from tether.policy.manifest import Normalizer
from tether.policy.paths import PathKind
from tether.policy.tensors import StateDict

if TYPE_CHECKING:
    from tether.policy.engine import PolicyEngine

PROBE_ROWS = 64
TIMED_BATCHES = (1, 8)


@dataclass(frozen=True)
class PathMeasurement:
    """One candidate's speed and accuracy as measured by 'auto'."""

    kind: PathKind
    median_latency_us: tuple[tuple[int, float], ...]  # (batch size, microseconds)
    max_action_diff_from_eager: float  # action units, on the probe batch
    eligible: bool


def probe_observations(
    normalizer: Normalizer, rows: int = PROBE_ROWS, seed: int = 0, spread: float = 1.0
) -> np.ndarray:
    """Observations ``mean + spread * std * N(0, 1)`` of a bundle's normalizer (float32)."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((rows, normalizer.dim))
    obs = np.asarray(normalizer.mean) + spread * np.sqrt(np.asarray(normalizer.var)) * z
    return np.asarray(obs, dtype=np.float32)


def choose_path(
    engine: PolicyEngine, actor_state: StateDict
) -> tuple[PathKind, tuple[PathMeasurement, ...]]:
    """Measure ``engine.config.auto_candidates`` and return the winner with all measurements."""
    cfg = engine.config
    probe = probe_observations(engine.bundle.manifest.normalizer)
    on_cpu = engine.device.type == "cpu"
    kinds: list[PathKind] = ["eager"]
    kinds += [
        k
        for k in cfg.auto_candidates
        if k != "eager" and (on_cpu or k == "jit") and (k != "compiled" or kernel.AVAILABLE)
    ]
    results: list[PathMeasurement] = []
    reference: np.ndarray | None = None
    with torch.inference_mode():
        for kind in kinds:
            path = engine.build_path(kind, actor_state)
            actions, _ = engine.run(path, probe, True)
            if reference is None:
                reference = actions
            diff = float(np.max(np.abs(actions - reference)))
            latencies = []
            for batch in TIMED_BATCHES:
                obs = probe[:batch]
                engine.run(path, obs, True)  # warm-up (first-call allocation, jit profiling)
                samples = []
                for _ in range(cfg.auto_repeats):
                    t0 = time.perf_counter()
                    engine.run(path, obs, True)
                    samples.append(time.perf_counter() - t0)
                latencies.append((batch, statistics.median(samples) * 1e6))
            results.append(
                PathMeasurement(kind, tuple(latencies), diff, diff <= cfg.auto_tolerance)
            )
    best = min(
        (m for m in results if m.eligible), key=lambda m: sum(us for _, us in m.median_latency_us)
    )
    return best.kind, tuple(results)
