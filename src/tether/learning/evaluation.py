"""Episodes of an actor on the built-in arm, and the success rate they add up to.

An episode's outcome is the env's ``EpisodeOutcome`` (``info["outcome"]`` on its last
step): success means the end effector settled within the success radius over the
episode's last ``settle_steps`` steps, and the final distance is where it ended.
Observations are normalized by the engine's own recipe
(``tether.policy.transforms.ObservationNormalizer``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tether.policy.action_frame import CommandStepFrame
from tether.policy.networks import Actor
from tether.policy.transforms import ObservationNormalizer
from tether.safety.supervises import ActionSupervisor
from tether.sim.env import ArmEnv


@dataclass(frozen=True)
class EvaluationResult:
    episodes: int
    success_rate: float  # fraction of episodes settled on the target at their end
    mean_return: float
    mean_final_distance_m: float


def evaluate_actor(
    actor: Actor,
    normalize: ObservationNormalizer,
    env: ArmEnv,
    episodes: int,
    *,
    seed: int = 10_000,
    supervisor: ActionSupervisor | None = None,
    frame: CommandStepFrame | None = None,
) -> EvaluationResult:
    """Deterministic episodes (``tanh(mu)``) of ``actor`` in ``env``; seeds ``seed``, ``seed+1``, ...

    With ``supervisor``, every action passes it first, as it would on the robot; with
    ``frame`` (the bundle's action frame) the actor's output is mapped to the action as
    the engine maps it.
    """
    successes, returns, distances = [], [], []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total, done = 0.0, False
        info: dict[str, Any] = {}
        previous: np.ndarray | None = None
        while not done:
            with torch.no_grad():
                x = torch.from_numpy(normalize(obs[None, :]))
                action, _ = actor.sample(x, deterministic=True)
            executed = action.numpy()[0]
            if frame is not None:
                executed = frame.actions(obs[None, :], executed[None, :])[0]
            if supervisor is not None:
                executed, _ = supervisor.filter(obs, executed, previous)
                previous = executed
            obs, reward, terminated, truncated, info = env.step(executed)
            total += float(reward)
            done = terminated or truncated
        outcome = info["outcome"]
        successes.append(outcome.success)
        returns.append(total)
        distances.append(outcome.final_distance_m)
    return EvaluationResult(
        episodes=episodes,
        success_rate=float(np.mean(successes)),
        mean_return=float(np.mean(returns)),
        mean_final_distance_m=float(np.mean(distances)),
    )
