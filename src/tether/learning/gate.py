"""The learner side of the promotion gate: the offline and the simulation stages.

Both run in the learner process (or a worker), never on the serving path, before a
candidate is handed to the server (whose shadow and canary stages follow, see
``tether.serving.promotion``). Each stage returns a ``StageVerdict`` naming every
number and the threshold it was held to:

1. **offline**, on recent real observations: the candidate's outputs are finite; its
   deterministic action change (RMS) and Gaussian KL from the live policy stay inside
   the trust region; the critic's value of its actions is not below the live policy's
   by more than a margin;
2. **simulation**: paired episodes (same seeds, same sampled dynamics) on the built-in
   arm under the current domain randomization, through the safety supervisor when one
   is given; return and success not worse than live's by more than their margins.

Invariant: :meth:`PromotionGate.evaluate` stops at the first failing stage, so a
candidate that fails offline is never even simulated, and never reaches the server.
The offline stage reads the weights of ``engine.bundle``; :meth:`PromotionGate.evaluate`
refuses an engine that serves other weights (one changed by ``swap_weights``), so the
numbers are always those of the policy that would act.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from tether.learning.errors import GateInputError
from tether.learning.publication import gaussian_kl
from tether.policy.bundle import PolicyBundle
from tether.policy.engine import PolicyEngine
from tether.policy.networks import TwinCritic
from tether.policy.tensors import state_sha256
from tether.serving.comparison import not_worse
from tether.serving.gate_records import GateStage, Measurement, StageVerdict
from tether.sim.config import ArmEnvConfig
from tether.sim.env import ArmEnv
from tether.sim.randomization import DomainRandomization

if TYPE_CHECKING:
    # Annotation only: importing tether.serving.shadow at run time pulls in the registry,
    # which the learner process has no use for.
    from tether.serving.shadow import Supervises


class OfflineStageConfig(BaseModel):
    """Pass criteria of the offline stage."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="Run this stage (flag)")
    min_observations: int = Field(
        default=64, ge=1, description="Recent real observations needed to judge (observations)"
    )
    max_action_change: float = Field(
        default=0.1,
        gt=0.0,
        description="Largest RMS change of the deterministic action (normalized units)",
    )
    max_kl: float = Field(
        default=0.05,
        gt=0.0,
        description="Largest mean KL(live || candidate) of the Gaussians (nats)",
    )
    value_margin: float = Field(
        default=0.5,
        ge=0.0,
        description="Allowed drop of the critic's mean value of its actions (return)",
    )


class SimulationStageConfig(BaseModel):
    """Episodes and pass criteria of the simulation stage."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="Run this stage (flag)")
    episodes: int = Field(default=8, ge=1, description="Paired episodes per policy (episodes)")
    seed: int = Field(default=0, ge=0, description="Seed of the first episode; the rest follow (1)")
    z: float = Field(
        default=1.645,
        ge=0.0,
        description="One-sided confidence multiplier; 1.645 is 95% (std errors)",
    )
    return_margin: float = Field(
        default=5.0, ge=0.0, description="Allowed shortfall of mean episode return vs live (return)"
    )
    success_margin: float = Field(
        default=0.25,
        ge=0.0,
        le=1.0,
        description="Allowed shortfall of success rate vs live (ratio)",
    )
    randomization: DomainRandomization | None = Field(
        default=None,
        description="Dynamics the learner simulates under; None is the nominal arm "
        "(the learner passes it to PromotionGate; ranges per knob)",
    )


class GateConfig(BaseModel):
    """The learner-side stages of the promotion gate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    offline: OfflineStageConfig = Field(default_factory=OfflineStageConfig, description="Offline")
    simulation: SimulationStageConfig = Field(
        default_factory=SimulationStageConfig,
        description="Simulation",
    )


def _normalized(bundle: PolicyBundle, observations: np.ndarray) -> torch.Tensor:
    n = bundle.manifest.normalizer
    mean = np.asarray(n.mean, dtype=np.float64)
    std = np.sqrt(np.asarray(n.var, dtype=np.float64) + n.epsilon)
    x = np.clip((np.asarray(observations, dtype=np.float64) - mean) / std, -n.clip, n.clip)
    return torch.from_numpy(x.astype(np.float32))


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
        a_c, a_l = torch.tanh(mu_c[finite]), torch.tanh(mu_l[finite])
        change = float((a_c - a_l).pow(2).mean().sqrt()) if a_c.numel() else float("inf")
        kl = (
            float(
                gaussian_kl(mu_l[finite], log_std_l[finite], mu_c[finite], log_std_c[finite]).mean()
            )
            if a_c.numel()
            else float("inf")
        )
        measurements += [
            Measurement("non_finite_outputs", float(non_finite), 0.0, "<="),
            Measurement("action_change_rms", change, config.max_action_change, "<="),
            Measurement("action_kl", kl, config.max_kl, "<="),
        ]
        if critic is not None and a_c.numel():
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


@dataclass(frozen=True)
class SimEpisode:
    """One simulated episode of one policy."""

    episode_return: float
    success: bool  # the end effector is at the target on the last step
    interventions: int


def run_episodes(
    engine: PolicyEngine,
    config: SimulationStageConfig,
    *,
    randomization: DomainRandomization | None,
    supervisor: Supervises | None = None,
    env_config: ArmEnvConfig | None = None,
) -> tuple[SimEpisode, ...]:
    """``config.episodes`` deterministic episodes, seeds ``config.seed + k``."""
    env = ArmEnv(randomization=randomization, config=env_config)
    out = []
    for k in range(config.episodes):
        obs, _ = env.reset(seed=config.seed + k)
        total, interventions, previous = 0.0, 0, None
        success, done = False, False
        while not done:
            action = engine.act(obs[None, :], deterministic=True).actions[0]
            if supervisor is not None:
                action, verdict = supervisor.filter(obs, action, previous)
                interventions += int(verdict.intervened)
            obs, reward, terminated, truncated, info = env.step(action)
            previous = action
            total += float(reward)
            success = bool(info["success"])
            done = terminated or truncated
        out.append(SimEpisode(total, success, interventions))
    env.close()
    return tuple(out)


def simulation_stage(
    candidate: PolicyEngine,
    live: PolicyEngine,
    config: SimulationStageConfig,
    *,
    randomization: DomainRandomization | None,
    supervisor: Supervises | None = None,
    env_config: ArmEnvConfig | None = None,
) -> StageVerdict:
    """Paired episodes of both policies; non-inferiority on return and success."""

    def episodes(engine: PolicyEngine) -> tuple[SimEpisode, ...]:
        return run_episodes(
            engine,
            config,
            randomization=randomization,
            supervisor=supervisor,
            env_config=env_config,
        )

    cand, base = episodes(candidate), episodes(live)
    # Paired seeds: compare per-episode differences against zero, which removes the
    # variance the two policies share (the same targets and dynamics).
    zeros = [0.0] * len(cand)
    measurements = (
        not_worse(
            "return",
            [c.episode_return - b.episode_return for c, b in zip(cand, base, strict=True)],
            zeros,
            margin=config.return_margin,
            z=config.z,
            higher_is_better=True,
        ),
        not_worse(
            "success",
            [float(c.success) - float(b.success) for c, b in zip(cand, base, strict=True)],
            zeros,
            margin=config.success_margin,
            z=config.z,
            higher_is_better=True,
        ),
    )
    return StageVerdict(
        GateStage.SIMULATION,
        candidate.version.id,
        live.version.id,
        measurements,
        samples=2 * len(cand),
    )


def _check_serves_bundle(role: str, engine: PolicyEngine) -> None:
    served = engine.version.weights_sha256
    if served != state_sha256(engine.bundle.actor_state):
        raise GateInputError(
            f"the {role} engine serves version {engine.version.id} (weights {served[:12]}) "
            f"but its bundle holds other weights; the offline stage judges engine.bundle, so "
            "build the engine from a bundle holding the served weights"
        )


class PromotionGate:
    """Runs the enabled learner-side stages in order and stops at the first failure."""

    def __init__(
        self,
        config: GateConfig,
        *,
        randomization: DomainRandomization | None = None,
        supervisor: Supervises | None = None,
        env_config: ArmEnvConfig | None = None,
    ) -> None:
        self.config = config
        self._randomization = randomization
        self._supervisor = supervisor
        self._env_config = env_config

    def evaluate(
        self,
        candidate: PolicyEngine,
        live: PolicyEngine,
        recent_observations: np.ndarray,
        *,
        critic: TwinCritic | None = None,
    ) -> tuple[StageVerdict, ...]:
        """Every stage's verdict up to and including the first failing one."""
        verdicts: list[StageVerdict] = []
        if self.config.offline.enabled:
            for role, engine in (("candidate", candidate), ("live", live)):
                _check_serves_bundle(role, engine)
            verdict = offline_stage(
                candidate.bundle,
                live.bundle,
                recent_observations,
                self.config.offline,
                critic=critic,
            )
            verdicts.append(verdict)
            if not verdict.passed:
                return tuple(verdicts)
        if self.config.simulation.enabled:
            verdicts.append(
                simulation_stage(
                    candidate,
                    live,
                    self.config.simulation,
                    randomization=self._randomization,
                    supervisor=self._supervisor,
                    env_config=self._env_config,
                )
            )
        return tuple(verdicts)
