"""Prior data for fine-tuning: the bundle's own policy on the nominal built-in arm.

RLPD mixes prior (offline) transitions into every online batch so the critic keeps
seeing the states and actions the pretrained policy was judged on. Here the prior data
is regenerated at learner start, not shipped: ``episodes`` episodes of the bundle's
actor with sampled actions (as the robots act) on the nominal arm under the bundle's
command interface. The transitions are deterministic in ``seed``, so a restarted learner
rebuilds the same prior data instead of checkpointing it.

Invariant: only a bundle for the built-in arm gets prior data (there is no simulator of
any other robot); every other bundle is refused with an error naming the setting.
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from tether.data.columns import TransitionArrays
from tether.data.records import TransitionBatch
from tether.learning.errors import LearningError
from tether.policy.bundle import PolicyBundle
from tether.policy.transforms import ObservationNormalizer
from tether.sim import ArmEnv, ArmEnvConfig, arm_spec


class PriorDataConfig(BaseModel):
    """Prior transitions mixed into every fine-tuning batch (RLPD's symmetric sampling)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    episodes: int = Field(
        default=0,
        ge=0,
        le=10_000,
        description="Episodes of the bundle's policy on the nominal built-in arm generated "
        "at learner start; 0 disables prior data (episodes)",
    )
    fraction: float = Field(
        default=0.5,
        ge=0.0,
        lt=1.0,
        description="Share of each batch drawn from the prior data, rounded to whole rows; "
        "RLPD's symmetric sampling is 0.5 (fraction)",
    )
    seed: int = Field(
        default=0, ge=0, description="Seed of the prior episodes and of the prior draws (1)"
    )


def nominal_arm_transitions(
    bundle: PolicyBundle, episodes: int, *, seed: int = 0
) -> TransitionArrays:
    """``episodes`` episodes of ``bundle``'s sampled policy on the nominal built-in arm,
    raw (unnormalized) observations, the proposed action as the executed one (the
    action the arm runs, after the bundle's action frame if it has one)."""
    spec = bundle.robot_spec
    if spec is None or spec.fingerprint() != arm_spec(spec.command_interface).fingerprint():
        raise LearningError(
            f"prior data (LearnerConfig.prior.episodes > 0) needs a bundle for the built-in "
            f"arm; {bundle.path} is for {spec.name if spec else 'an unnamed robot'}: set "
            "prior.episodes to 0"
        )
    env = ArmEnv(seed=seed, config=ArmEnvConfig(command_interface=spec.command_interface))
    actor = bundle.build_actor().eval()
    normalize = ObservationNormalizer(bundle.manifest.normalizer)
    generator = torch.Generator().manual_seed(seed)
    frame = bundle.manifest.action.frame
    steps = episodes * env.config.episode_steps
    arch = bundle.architecture
    rows = TransitionArrays.empty(steps, arch.obs_dim, arch.act_dim)
    i = 0
    for episode in range(episodes):
        # Seeds far from the benchmarks' task seeds (0, 1, ...): prior tasks are not test tasks.
        obs, _ = env.reset(seed=1_000_000 + seed * 100_003 + episode)
        done = False
        while not done and i < steps:
            with torch.no_grad():
                x = torch.from_numpy(normalize(obs[None, :]))
                action = actor.sample(x, generator=generator)[0].numpy()[0]
            # Rows hold what a robot records, the action the arm ran (LearnerCore maps it
            # back to the actor's output, as for the robots' own transitions).
            executed = action if frame is None else frame.actions(obs[None, :], action[None, :])[0]
            nxt, reward, terminated, truncated, _ = env.step(executed)
            rows.observations[i] = obs
            rows.actions[i] = rows.proposed_actions[i] = executed
            rows.rewards[i] = reward
            rows.next_observations[i] = nxt
            rows.terminated[i], rows.truncated[i] = terminated, truncated
            done = terminated or truncated
            obs = nxt
            i += 1
    return rows.take(slice(0, i))


class PriorData:
    """Normalized prior transitions and the draws of their share of a batch."""

    def __init__(self, rows: TransitionArrays, config: PriorDataConfig) -> None:
        if not len(rows):
            raise LearningError("prior data is empty; generate at least one episode")
        self.rows = rows
        self.fraction = config.fraction
        self._rng = np.random.default_rng(config.seed)

    def __len__(self) -> int:
        return len(self.rows)

    def rows_in(self, batch_size: int) -> int:
        """How many rows of a batch of ``batch_size`` come from the prior data (exact):
        the rounded share, leaving at least one row of the robots' data."""
        return min(round(self.fraction * batch_size), batch_size - 1)

    def sample(self, n: int) -> TransitionBatch:
        return self.rows.batch_of(self._rng.integers(0, len(self.rows), n))


def concat_batches(first: TransitionBatch, second: TransitionBatch) -> TransitionBatch:
    """Rows of ``first`` then ``second``."""
    return TransitionBatch(*(np.concatenate(cols) for cols in zip(first, second, strict=True)))
