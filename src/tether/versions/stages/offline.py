"""The gate's offline stage: the candidate against live on recent real observations.

Runs in the learner process, before a candidate is published. It measures, on the
observations the robots sent most recently: that the candidate's outputs are finite;
that its deterministic action change (RMS) and Gaussian KL from the live policy stay
inside the trust region (``tether.policy.distance``); and, when the learner's critic is
given, that the critic's value of the candidate's actions is not below live's by more
than a margin. A candidate whose actor carries a goal shift, like live's, is held to the
largest change of that shift instead of the action and KL bounds (its own layers are
live's; see ``tether.learning.publication``).
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from tether.policy.bundle import PolicyBundle
from tether.policy.distance import (
    MAX_ACTION_CHANGE_RMS,
    MAX_GOAL_SHIFT_CHANGE,
    MAX_KL_NATS,
    goal_shift_change,
    policy_distance,
)
from tether.policy.networks import TwinCritic
from tether.policy.transforms import ObservationNormalizer
from tether.versions.records import GateStage, Measurement, StageVerdict


class OfflineStageConfig(BaseModel):
    """Pass criteria of the offline stage."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="Run this stage (flag)")
    min_observations: int = Field(
        default=64, ge=1, description="Recent real observations needed to judge (observations)"
    )
    max_action_change: float = Field(
        default=MAX_ACTION_CHANGE_RMS,
        gt=0.0,
        description="Largest RMS change of the deterministic action (normalized units)",
    )
    max_kl: float = Field(
        default=MAX_KL_NATS,
        gt=0.0,
        description="Largest mean KL(live || candidate) of the Gaussians (nats)",
    )
    max_goal_shift_change: float = Field(
        default=MAX_GOAL_SHIFT_CHANGE,
        gt=0.0,
        description="Largest change of a goal-shift actor's shift, in the shifted slice's "
        "unit (rad for the arm's command); replaces the action and KL bounds when live and "
        "candidate carry one",
    )
    value_margin: float = Field(
        default=0.5,
        ge=0.0,
        description="Allowed drop of the critic's mean value of its actions (return)",
    )


def _normalized(bundle: PolicyBundle, observations: np.ndarray) -> torch.Tensor:
    """``observations`` as the bundle's engine would normalize them."""
    return torch.from_numpy(ObservationNormalizer(bundle.manifest.normalizer)(observations))


def offline_stage(
    candidate: PolicyBundle,
    live: PolicyBundle,
    observations: np.ndarray,
    config: OfflineStageConfig,
    *,
    critic: TwinCritic | None = None,
) -> StageVerdict:
    """Judge ``candidate`` against ``live`` on recent real (raw) ``observations``.

    ``critic`` is the learner's twin critic over the live bundle's normalized
    observations; without one the value criterion is left out (and said so by its
    absence in the verdict).
    """
    n = int(observations.shape[0])
    measurements = [Measurement("observations", float(n), float(config.min_observations), ">=")]
    if n == 0:
        return StageVerdict(
            GateStage.OFFLINE, candidate.version.id, live.version.id, tuple(measurements), 0
        )
    cand_actor, live_actor = candidate.build_actor(), live.build_actor()
    x_live = _normalized(live, observations)
    with torch.no_grad():
        mu_c, log_std_c = cand_actor(_normalized(candidate, observations))
        mu_l, log_std_l = live_actor(x_live)
        finite = torch.isfinite(mu_c).all(-1) & torch.isfinite(log_std_c).all(-1)
        non_finite = int((~finite).sum())
        distance = policy_distance(mu_l[finite], log_std_l[finite], mu_c[finite], log_std_c[finite])
        measurements.append(Measurement("non_finite_outputs", float(non_finite), 0.0, "<="))
        if cand_actor.goal is not None and live_actor.goal is not None:
            reach = goal_shift_change(live_actor, cand_actor, x_live[finite])
            measurements.append(
                Measurement("goal_shift_change", reach, config.max_goal_shift_change, "<=")
            )
        else:
            measurements += [
                Measurement(
                    "action_change_rms", distance.action_change_rms, config.max_action_change, "<="
                ),
                Measurement("action_kl", distance.kl, config.max_kl, "<="),
            ]
        if critic is not None and bool(finite.any()):
            a_c, a_l = torch.tanh(mu_c[finite]), torch.tanh(mu_l[finite])
            x = x_live[finite]
            q_c = torch.minimum(*critic(x, a_c))
            q_l = torch.minimum(*critic(x, a_l))
            value_diff = float((q_c - q_l).mean())
            measurements.append(
                Measurement("critic_value_diff", value_diff, -config.value_margin, ">=")
            )
    return StageVerdict(
        GateStage.OFFLINE, candidate.version.id, live.version.id, tuple(measurements), n
    )
