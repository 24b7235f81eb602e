"""The gate's simulation stage: paired episodes of candidate and live on the built-in arm.

Runs in the learner process, before a candidate is published. Both policies play the
same seeds under the same sampled dynamics (the current domain randomization), through
the safety supervisor when one is given. Each episode is judged by the env's own
``EpisodeOutcome`` (settled success, final distance; the return is a secondary figure):
the candidate passes when its success, final distance and return are not worse than
live's by more than their margins (paired differences against zero,
``tether.versions.statistics.not_worse``). It is a no-harm check: the simulator does not
have the robot's drift, so it cannot judge an adaptation to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from tether.policy.engine import PolicyEngine
from tether.sim.config import ArmEnvConfig
from tether.sim.env import ArmEnv
from tether.sim.randomization import DomainRandomization
from tether.versions.protocols import Supervises
from tether.versions.records import GateStage, StageVerdict
from tether.versions.statistics import confidence_z, not_worse


class SimulationStageConfig(BaseModel):
    """Episodes and pass criteria of the simulation stage."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="Run this stage (flag)")
    episodes: int = Field(default=8, ge=1, description="Paired episodes per policy (episodes)")
    seed: int = Field(default=0, ge=0, description="Seed of the first episode; the rest follow (1)")
    z: float = confidence_z()
    return_margin: float = Field(
        default=5.0, ge=0.0, description="Allowed shortfall of mean episode return vs live (return)"
    )
    distance_margin_m: float = Field(
        default=0.02,
        ge=0.0,
        description="Allowed excess of mean final end-effector distance vs live (m)",
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
        "(the learner passes it to LearnerGate; ranges per knob)",
    )


@dataclass(frozen=True)
class SimEpisode:
    """One simulated episode of one policy."""

    episode_return: float
    success: bool  # settled within the success radius over the episode's last steps
    interventions: int
    final_distance_m: float


def run_episodes(
    engine: PolicyEngine,
    config: SimulationStageConfig,
    *,
    randomization: DomainRandomization | None,
    supervisor: Supervises | None = None,
    env_config: ArmEnvConfig | None = None,
) -> tuple[SimEpisode, ...]:
    """``config.episodes`` deterministic episodes, seeds ``config.seed + k``, on the arm
    commanded the way the engine's bundle commands it (unless ``env_config`` says)."""
    if env_config is None:
        spec = engine.bundle.robot_spec
        if spec is not None:
            env_config = ArmEnvConfig(command_interface=spec.command_interface)
    env = ArmEnv(randomization=randomization, config=env_config)
    out = []
    for k in range(config.episodes):
        obs, _ = env.reset(seed=config.seed + k)
        total, interventions, previous = 0.0, 0, None
        done = False
        while not done:
            action = engine.act(obs[None, :], deterministic=True).actions[0]
            if supervisor is not None:
                action, verdict = supervisor.filter(obs, action, previous)
                interventions += int(verdict.intervened)
            obs, reward, terminated, truncated, _ = env.step(action)
            previous = action
            total += float(reward)
            done = terminated or truncated
        outcome = env.episode_outcome()
        out.append(SimEpisode(total, outcome.success, interventions, outcome.final_distance_m))
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
    """Paired episodes of both policies; non-inferiority on success, final distance and
    return."""

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
            "success",
            [float(c.success) - float(b.success) for c, b in zip(cand, base, strict=True)],
            zeros,
            margin=config.success_margin,
            z=config.z,
            higher_is_better=True,
        ),
        not_worse(
            "final_distance_m",
            [c.final_distance_m - b.final_distance_m for c, b in zip(cand, base, strict=True)],
            zeros,
            margin=config.distance_margin_m,
            z=config.z,
            higher_is_better=False,
        ),
        not_worse(
            "return",
            [c.episode_return - b.episode_return for c, b in zip(cand, base, strict=True)],
            zeros,
            margin=config.return_margin,
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
