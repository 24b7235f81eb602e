"""Supervising an action chunk: every step, in order, each judged against the one before.

A policy that outputs ``H`` actions per call (ACT, pi0, diffusion policies) hands the
robot a plan, not one command. :func:`supervise_chunk` runs the supervisor's ordinary
per-step interface over the whole plan: step ``k`` is filtered with step ``k - 1``'s
*safe* action as its previous action (the first step with the robot's last executed
action), so rate limits hold across the chunk exactly as they hold across control
cycles, and a correction at step ``k`` carries into every later step's limits.

It needs nothing of a supervisor beyond ``filter(observation, proposed, previous, *,
observation_age_s)`` (``tether.safety.Supervisor`` and the position supervisor both
have it), or any step function of that shape (:data:`StepFilter`), e.g. serving's
``SessionSupervisor.decide`` bound to a level.

Invariant: the returned chunk has exactly the proposed chunk's length; every row of it
is the output of one supervisor step (finite, within limits); ``verdicts[k]`` is step
``k``'s own verdict. No step of a chunk reaches the robot without having been checked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tether.safety.errors import SafetyError
from tether.safety.verdict import SafetyVerdict


class FiltersSteps(Protocol):
    """The per-step interface every supervisor has."""

    def filter(
        self,
        observation: Any,
        proposed_action: Any,
        previous_action: Any | None = None,
        *,
        observation_age_s: float | None = None,
    ) -> tuple[np.ndarray, SafetyVerdict]: ...


# (observation, proposed step, previous safe step or None, observation age in s)
StepFilter = Callable[
    [np.ndarray, np.ndarray, np.ndarray | None, float], tuple[np.ndarray, SafetyVerdict]
]


@dataclass(frozen=True)
class ChunkVerdict:
    """The supervised chunk and what happened to each of its steps."""

    actions: np.ndarray  # (H, act_dim) float32: the steps that may be executed, in order
    verdicts: tuple[SafetyVerdict, ...]  # one per step

    @property
    def horizon(self) -> int:
        return len(self.verdicts)

    @property
    def intervened(self) -> bool:
        return any(v.intervened for v in self.verdicts)

    @property
    def first_intervention(self) -> int | None:
        """The index of the first step the supervisor changed, or None."""
        for k, verdict in enumerate(self.verdicts):
            if verdict.intervened:
                return k
        return None

    @property
    def checks(self) -> int:
        """Every check that fired on any step (the union of the steps' bits)."""
        bits = 0
        for verdict in self.verdicts:
            bits |= int(verdict.checks)
        return bits


def filter_step(supervisor: FiltersSteps) -> StepFilter:
    """``supervisor.filter`` as a :data:`StepFilter`."""

    def step(
        observation: np.ndarray, proposed: np.ndarray, previous: np.ndarray | None, age_s: float
    ) -> tuple[np.ndarray, SafetyVerdict]:
        return supervisor.filter(observation, proposed, previous, observation_age_s=age_s)

    return step


def supervise_chunk(
    step: StepFilter | FiltersSteps,
    observation: np.ndarray,
    chunk: np.ndarray,
    previous_action: np.ndarray | None = None,
    *,
    observation_age_s: float = 0.0,
    step_period_s: float = 0.0,
) -> ChunkVerdict:
    """Filter every step of ``chunk`` (``(H, act_dim)``) in order; see the module docstring.

    ``observation`` is the state the chunk was computed from: the only one known when
    the plan is checked, so every step is judged from it. Step ``k`` is judged
    ``observation_age_s + k * step_period_s`` old (with ``step_period_s`` the robot's
    control period, a supervisor's staleness limit cuts a chunk's tail that would be
    executed too long after its observation; 0 judges every step at the chunk's age).
    """
    proposed = np.asarray(chunk)
    if proposed.ndim != 2 or proposed.shape[0] < 1:
        raise SafetyError(
            f"an action chunk must have shape (H, act_dim) with H >= 1, got {proposed.shape}"
        )
    if not (np.isfinite(step_period_s) and step_period_s >= 0):
        raise SafetyError(f"step_period_s must be finite and >= 0, got {step_period_s}")
    run = filter_step(step) if hasattr(step, "filter") else step
    assert callable(run)
    safe = np.empty(proposed.shape, dtype=np.float32)
    verdicts: list[SafetyVerdict] = []
    previous = previous_action
    for k in range(proposed.shape[0]):
        age = observation_age_s + k * step_period_s
        action, verdict = run(observation, proposed[k], previous, age)
        safe[k] = action
        verdicts.append(verdict)
        previous = safe[k]
    return ChunkVerdict(safe, tuple(verdicts))
