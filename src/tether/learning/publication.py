"""What gets deployed: a Polyak step toward the learner's actor, held inside a trust region.

The deployed actor never jumps to the learner's weights. Each publication moves it by
``alpha`` (``deployed + alpha * (learner - deployed)``, parameter-wise). Before that step
is published, the candidate is compared with the deployed policy on recent *real*
states: the RMS change of the deterministic action and the mean KL divergence between
the two Gaussian policies (``tether.policy.distance``). Above either threshold the step is halved (up to
``max_shrink_steps`` times); if no step fits, the publication is withheld. Every
decision is a :class:`TrustRegionDecision`, counted by the learner.

An actor with a goal shift (``tether.policy.networks.GoalShift``, trained by
``tether.learning.hindsight``) changes only where it reaches: its step starts at the whole
way (``alpha = 1``) and is halved until the largest change of the goal shift on the
recent states is at most ``max_goal_shift_change`` (the shifted slice's unit); the action
and KL bounds, which its frozen layers' narrow Gaussian would turn into a bound of
millimetres, do not apply to it.

Invariant: a step this module accepts satisfies its thresholds on the states it was
given; the deployed weights it returns are exactly the candidate that was measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from tether.policy.distance import (
    MAX_ACTION_CHANGE_RMS,
    MAX_GOAL_SHIFT_CHANGE,
    MAX_KL_NATS,
    PolicyDistance,
    goal_shift_change,
    policy_distance,
)
from tether.policy.networks import Actor

StateDict = dict[str, torch.Tensor]


class PublicationConfig(BaseModel):
    """How far one publication may move the deployed policy, and how often."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    polyak_alpha: float = Field(
        default=0.2,
        ge=0.1,
        le=0.3,
        description="Fraction of the way the deployed actor moves toward the learner's per publication (1)",
    )
    max_action_change: float = Field(
        default=MAX_ACTION_CHANGE_RMS,
        gt=0.0,
        description="Largest RMS change of the deterministic action on recent states, in normalized action units ([-1, 1])",
    )
    max_kl: float = Field(
        default=MAX_KL_NATS,
        gt=0.0,
        description="Largest mean KL(deployed || candidate) on recent states (nats)",
    )
    max_goal_shift_change: float = Field(
        default=MAX_GOAL_SHIFT_CHANGE,
        gt=0.0,
        description="Largest change of a goal-shift actor's shift on recent states, in the "
        "shifted slice's unit (rad for the arm's command); replaces the action and KL "
        "bounds for such actors",
    )
    min_goal_shift_change: float = Field(
        default=0.01,
        ge=0.0,
        description="A goal-shift actor's candidate that moves its shift by less than this "
        "(the shifted slice's unit: rad for the arm's command) is not published: it would "
        "hold the gate for a change the robots cannot tell from live's",
    )
    max_shrink_steps: int = Field(
        default=3,
        ge=0,
        le=16,
        description="How many times a too-large step is halved before it is withheld (steps)",
    )
    min_interval_s: float = Field(
        default=2.0, ge=0.0, description="Shortest time between two publications (s)"
    )
    recent_states: int = Field(
        default=1024,
        ge=1,
        description="Recent real observations kept to measure the trust region on (states)",
    )
    promote_directly: bool = Field(
        default=False,
        description="UNSAFE FOR HARDWARE: mark publications to go live without the promotion gate (flag)",
    )


class PublishOutcome(StrEnum):
    ACCEPTED = "accepted"  # the full alpha step fits the trust region
    SHRUNK = "shrunk"  # a halved step fits
    WITHHELD = "withheld"  # no step fits; nothing is published
    UNCHANGED = "unchanged"  # a goal-shift step too small to publish (min_goal_shift_change)


@dataclass(frozen=True)
class TrustRegionDecision:
    outcome: PublishOutcome
    alpha: float  # the step used; 0.0 when withheld
    distance: PolicyDistance  # of the published step, or of the smallest tried when withheld
    shrink_steps: int


def polyak_blend(deployed: StateDict, learner: StateDict, alpha: float) -> StateDict:
    """``deployed + alpha * (learner - deployed)`` per tensor, as new tensors."""
    if deployed.keys() != learner.keys():
        raise ValueError(
            f"cannot blend actor states with different tensors: {sorted(deployed.keys() ^ learner.keys())}"
        )
    return {k: torch.lerp(deployed[k], learner[k], alpha) for k in deployed}


class TrustRegion:
    """Measures candidate steps against the deployed actor on recent states."""

    def __init__(self, actor_template: Actor, config: PublicationConfig) -> None:
        # Two scratch networks of the right architecture, reloaded per measurement, so
        # measuring allocates no new modules.
        self._deployed = Actor(actor_template.arch).eval()
        self._candidate = Actor(actor_template.arch).eval()
        self._deployed.requires_grad_(False)
        self._candidate.requires_grad_(False)
        self.config = config
        self._goal = actor_template.arch.goal_shift is not None

    def distance(
        self, deployed: StateDict, candidate: StateDict, states: np.ndarray
    ) -> PolicyDistance:
        """Action change and KL between two actors on normalized ``states`` (N, obs_dim)."""
        self._deployed.load_state_dict(deployed)
        self._candidate.load_state_dict(candidate)
        obs = torch.from_numpy(np.ascontiguousarray(states, dtype=np.float32))
        with torch.no_grad():
            mu_d, log_std_d = self._deployed(obs)
            mu_c, log_std_c = self._candidate(obs)
            d = policy_distance(mu_d, log_std_d, mu_c, log_std_c)
            if not self._goal:
                return d
            reach = goal_shift_change(self._deployed, self._candidate, obs)
            return PolicyDistance(d.action_change_rms, d.kl, reach)

    def fits(self, d: PolicyDistance) -> bool:
        if self._goal:
            return d.goal_shift_change <= self.config.max_goal_shift_change
        return d.action_change_rms <= self.config.max_action_change and d.kl <= self.config.max_kl

    def step(
        self, deployed: StateDict, learner: StateDict, states: np.ndarray
    ) -> tuple[TrustRegionDecision, StateDict | None]:
        """The largest Polyak step (alpha, alpha/2, ...) that fits; None when withheld."""
        alpha = 1.0 if self._goal else self.config.polyak_alpha
        distance = PolicyDistance(0.0, 0.0)
        for shrink in range(self.config.max_shrink_steps + 1):
            candidate = polyak_blend(deployed, learner, alpha)
            distance = self.distance(deployed, candidate, states)
            small = distance.goal_shift_change < self.config.min_goal_shift_change
            if shrink == 0 and self._goal and small:
                return TrustRegionDecision(PublishOutcome.UNCHANGED, 0.0, distance, 0), None
            if self.fits(distance):
                outcome = PublishOutcome.ACCEPTED if shrink == 0 else PublishOutcome.SHRUNK
                return TrustRegionDecision(outcome, alpha, distance, shrink), candidate
            alpha /= 2
        return (
            TrustRegionDecision(
                PublishOutcome.WITHHELD, 0.0, distance, self.config.max_shrink_steps
            ),
            None,
        )


class RecentStates:
    """A ring of the last ``capacity`` real (normalized) observations."""

    def __init__(self, capacity: int, obs_dim: int) -> None:
        self._data = np.zeros((capacity, obs_dim), dtype=np.float32)
        self._next = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def extend(self, observations: np.ndarray) -> None:
        cap = self._data.shape[0]
        obs = observations[-cap:]
        n = obs.shape[0]
        first = min(n, cap - self._next)
        self._data[self._next : self._next + first] = obs[:first]
        self._data[: n - first] = obs[first:]
        self._next = (self._next + n) % cap
        self._size = min(cap, self._size + n)

    def states(self) -> np.ndarray:
        """The kept observations (order irrelevant to the trust region)."""
        return self._data[: self._size]
