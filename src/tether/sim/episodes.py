"""Run whole episodes of any controller on an ``ArmEnv`` and collect their outcomes.

A controller here is just ``act(observation) -> action`` plus an optional ``reset()``
called before each episode, so policies, scripted controllers and oracles are measured
by one loop on the same paired tasks (episode seeds).

Invariant: each outcome is the env's own ``EpisodeOutcome`` of that episode, read on its
last step; nothing here judges success.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
from numpy.typing import NDArray

from tether.sim.env import ArmEnv
from tether.sim.outcome import EpisodeOutcome

Act = Callable[[NDArray[np.float32]], NDArray[np.floating]]


def run_episodes(
    env: ArmEnv,
    act: Act,
    seeds: Iterable[int],
    *,
    reset: Callable[[], None] | None = None,
) -> tuple[EpisodeOutcome, ...]:
    """One episode per seed (``env.reset(seed=s)``), each run to truncation."""
    outcomes = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        if reset is not None:
            reset()
        truncated = terminated = False
        while not (truncated or terminated):
            obs, _, terminated, truncated, _ = env.step(np.asarray(act(obs), dtype=np.float32))
        outcomes.append(env.episode_outcome())
    return tuple(outcomes)


def success_rate(outcomes: Iterable[EpisodeOutcome]) -> float:
    """Fraction of ``outcomes`` that succeeded (settled on the target)."""
    values = [o.success for o in outcomes]
    return float(np.mean(values)) if values else float("nan")
