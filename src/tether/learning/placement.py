"""Which CPU cores the learner gets, so training never competes with serving for a core.

Defaults by machine size: on 2 cores the learner gets one core and one thread; on 4,
two cores and two threads; from 8 up, the upper half of the cores and at most 4 torch
threads (SAC on 256x256 networks gains little past that). Serving keeps the rest.
With a single core there is nothing to split; the learner then relies on ``nice``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class LearnerPlacement:
    learner_cores: tuple[int, ...]
    serving_cores: tuple[int, ...]
    torch_threads: int


def available_cores() -> tuple[int, ...]:
    """Cores this process may run on (respects cgroup/cpuset limits, unlike cpu_count)."""
    return tuple(sorted(os.sched_getaffinity(0)))


def learner_placement(cores: tuple[int, ...] | None = None) -> LearnerPlacement:
    """Split ``cores`` (default: the available ones) between serving and the learner."""
    cores = available_cores() if cores is None else tuple(sorted(cores))
    n = len(cores)
    if n <= 1:
        return LearnerPlacement(cores, cores, 1)
    learner = cores[-1:] if n < 4 else cores[n // 2 :]
    serving = tuple(c for c in cores if c not in learner)
    return LearnerPlacement(learner, serving, min(len(learner), 4))
