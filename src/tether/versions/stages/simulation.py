"""The gate's simulation stage: a no-harm check of candidate vs parent on the built-in arm.

Runs in the learner process, before a candidate is published. Both policies play the
same seeds under the same sampled dynamics, through the safety supervisor when one is
given. The simulator does not know which arm the robot has become, so it cannot judge an
adaptation to it: the stage only asks that the candidate does no harm *over the arms the
robot may be*, by default the built-in arm's rated envelope
(``DomainRandomization.rated``: actuator gain down to 0.6, friction up to 4x, payload up
to 0.5 kg, up to one step of delay). On the nominal arm alone, a correct adaptation to a
sagging arm is harm by construction (it reaches above the target the nominal arm would
hit): measured, a learned goal shift that took the drifted arm from 0.35 to 0.70 success
lost 0.44 success on the nominal arm, and its negation 0.31, so the nominal arm rejects
both; over the rated envelope the learned shift lost 0.13 (passes) and its negation
0.38 (fails) (16 paired episodes, docs/benchmarks.md). It passes when

- the candidate has no joint-limit violation and no obstacle contact in any episode;
- its success rate is not below the parent's by more than ``success_margin``;
- its mean final end-effector distance is not above the parent's by more than
  ``distance_margin_m``.

A candidate that differs from its parent only in its goal shift (the learner trains
nothing else under ``hindsight``) changes only where it reaches, and the simulator cannot
know where the robot's arm needs it to: measured in a default run, every candidate past
the first adaptation step lost 0.5-0.63 success over the envelope (it reaches above
targets a lighter arm hits), while their parent, itself such a step, had just won the
paired canary on the drifted robot (+0.25 success). For such a candidate the success
margin is ``goal_shift_success_margin`` and the distance margin grows by
``goal_shift_distance_margin_m``: the stage still refuses a violation, a contact, a
collapse, or any change to the actor's own layers under the ordinary margins.

The two differences are means over the paired episodes (same seed, same dynamics), so
the variance the policies share drops out. The return and the parent's own counts are
reported as figures, not judged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from pydantic import BaseModel, ConfigDict, Field

from tether.policy.engine import PolicyEngine
from tether.policy.networks import GOAL_PREFIX
from tether.sim.config import ArmEnvConfig
from tether.sim.env import ArmEnv
from tether.sim.randomization import DomainRandomization
from tether.versions.protocols import Supervises
from tether.versions.records import Figure, GateStage, Measurement, StageVerdict


class SimulationStageConfig(BaseModel):
    """Episodes and pass criteria of the simulation stage."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="Run this stage (flag)")
    episodes: int = Field(default=8, ge=1, description="Paired episodes per policy (episodes)")
    seed: int = Field(default=0, ge=0, description="Seed of the first episode; the rest follow (1)")
    distance_margin_m: float = Field(
        default=0.03,
        ge=0.0,
        description="Allowed excess of the candidate's mean final end-effector distance over "
        "the parent's, paired by seed (m)",
    )
    success_margin: float = Field(
        default=0.25,
        ge=0.0,
        le=1.0,
        description="Allowed shortfall of the candidate's success rate below the parent's, "
        "paired by seed (ratio)",
    )
    goal_shift_success_margin: float = Field(
        default=0.75,
        ge=0.0,
        le=1.0,
        description="The success shortfall allowed instead of success_margin when the "
        "candidate differs from its parent only in its goal shift (ratio)",
    )
    goal_shift_distance_margin_m: float = Field(
        default=0.1,
        ge=0.0,
        description="What distance_margin_m grows by when the candidate differs from its "
        "parent only in its goal shift (m)",
    )
    randomization: DomainRandomization | None = Field(
        default_factory=DomainRandomization.rated,
        description="Dynamics the learner simulates under, drawn per paired episode; the "
        "default is the arm's rated envelope (DomainRandomization.rated), None the nominal arm "
        "(ranges per knob)",
    )


@dataclass(frozen=True)
class SimEpisode:
    """One simulated episode of one policy."""

    episode_return: float
    success: bool  # settled within the success radius over the episode's last steps
    interventions: int
    final_distance_m: float
    joint_limit_violation_steps: int = 0
    obstacle_contact_steps: int = 0


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
        out.append(
            SimEpisode(
                total,
                outcome.success,
                interventions,
                outcome.final_distance_m,
                outcome.joint_limit_violation_steps,
                outcome.obstacle_contact_steps,
            )
        )
    env.close()
    return tuple(out)


def _reach_only(candidate: PolicyEngine, live: PolicyEngine) -> bool:
    """Whether the two differ only in their goal shifts (the same architecture, with a
    goal shift, and the same weights outside ``goal.*``)."""
    arch = candidate.bundle.architecture
    if arch.goal_shift is None or live.bundle.architecture != arch:
        return False
    mine, theirs = candidate.bundle.actor_state, live.bundle.actor_state
    return all(
        name.startswith(GOAL_PREFIX) or torch.equal(tensor, theirs[name])
        for name, tensor in mine.items()
    )


def simulation_stage(
    candidate: PolicyEngine,
    live: PolicyEngine,
    config: SimulationStageConfig,
    *,
    randomization: DomainRandomization | None,
    supervisor: Supervises | None = None,
    env_config: ArmEnvConfig | None = None,
) -> StageVerdict:
    """Paired episodes of both policies; the no-harm criteria of the module docstring."""

    def episodes(engine: PolicyEngine) -> tuple[SimEpisode, ...]:
        return run_episodes(
            engine,
            config,
            randomization=randomization,
            supervisor=supervisor,
            env_config=env_config,
        )

    cand, base = episodes(candidate), episodes(live)
    n = len(cand)
    success_margin, distance_margin = config.success_margin, config.distance_margin_m
    if _reach_only(candidate, live):
        success_margin = config.goal_shift_success_margin
        distance_margin += config.goal_shift_distance_margin_m

    def mean_diff(read: Callable[[SimEpisode], float]) -> float:
        return math.fsum(read(c) - read(b) for c, b in zip(cand, base, strict=True)) / n

    measurements = (
        Measurement(
            "joint_limit_violation_steps",
            float(sum(c.joint_limit_violation_steps for c in cand)),
            0.0,
            "<=",
        ),
        Measurement(
            "obstacle_contact_steps", float(sum(c.obstacle_contact_steps for c in cand)), 0.0, "<="
        ),
        Measurement("success_diff", mean_diff(lambda e: float(e.success)), -success_margin, ">="),
        Measurement(
            "final_distance_diff_m",
            mean_diff(lambda e: e.final_distance_m),
            distance_margin,
            "<=",
        ),
    )
    figures = (
        Figure("candidate_success", sum(c.success for c in cand) / n),
        Figure("parent_success", sum(b.success for b in base) / n),
        Figure(
            "parent_joint_limit_violation_steps",
            float(sum(b.joint_limit_violation_steps for b in base)),
        ),
        Figure("parent_obstacle_contact_steps", float(sum(b.obstacle_contact_steps for b in base))),
        Figure("return_diff", mean_diff(lambda e: e.episode_return)),
    )
    return StageVerdict(
        GateStage.SIMULATION,
        candidate.version.id,
        live.version.id,
        measurements,
        samples=2 * n,
        figures=figures,
    )
