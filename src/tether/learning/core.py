"""The learner's core: what happens to a transition between the channel and an update.

:class:`LearnerCore` normalizes incoming transitions with the bundle's normalizer (the
engine's own function), learns the policy's *proposed* action unless a person overrode
it (mapped into the actor's output space when the bundle has an action frame), and
feeds the algorithm ``LearnerConfig.algorithm`` names:

- SAC: the replay buffer (its recent/older mix), prior data mixed into each batch when
  configured (``LearnerConfig.prior``), updates at the update-to-data ratio;
- PPO: :class:`~tether.learning.ppo.Rollouts` of the version :meth:`LearnerCore.follow`
  names (rows of any other version are dropped), each full rollout's epochs of
  mini-batch updates, streamed ``most`` at a time;
- hindsight: :class:`~tether.learning.hindsight.HindsightLearner`, fed the raw
  transitions, labels every finished episode with where it came to rest and regresses
  the actor's goal shift (the weights of the version that acted come from
  :meth:`LearnerCore.know_versions`), a budget of updates per labelled episode.

It knows nothing of processes, shared weights, pacing or the
gate: :class:`tether.learning.Learner` wraps it for ``tether run``, and
``benchmarks/bench_adaptation.py`` drives the same object from a simulated arm, so the
benchmark measures the recipe ``tether run`` runs.

Invariants: with prior data, each SAC batch holds exactly
``PriorData.rows_in(batch_size)`` prior rows and the rest from the replay buffer; the
replay buffer holds only the robots' transitions; every row of a PPO batch was produced
by the version the core follows, and its old log-probability is that version's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from tether.data.columns import TransitionArrays
from tether.data.records import TransitionBatch
from tether.data.replay.buffer import ReplayBuffer
from tether.data.step import HUMAN_SOURCE_CODE
from tether.learning.algorithm import Algorithm, StateDict
from tether.learning.errors import LearnerConfigError, LearningError
from tether.learning.hindsight import HindsightLearner
from tether.learning.learner_config import LearnerConfig
from tether.learning.ppo import PPO, PPOStats, Rollouts, ppo_from_bundle
from tether.learning.prior import PriorData, concat_batches, nominal_arm_transitions
from tether.learning.sac import SAC, TrainingStats, sac_from_bundle
from tether.policy.bundle import PolicyBundle
from tether.policy.transforms import ObservationNormalizer


class LearnerCore:
    """The configured algorithm and its data (replay + prior, or rollouts); fed raw
    transitions, runs updates."""

    def __init__(self, bundle: PolicyBundle, config: LearnerConfig) -> None:
        self.config = config
        self.normalize = ObservationNormalizer(bundle.manifest.normalizer)
        self.frame = bundle.manifest.action.frame
        arch = bundle.architecture
        self._sac: SAC | None = None
        self._replay: ReplayBuffer | None = None
        self._ppo: PPO | None = None
        self.rollouts: Rollouts | None = None
        self._schedule: Iterator[PPOStats] | None = None
        self.last_ppo_stats: PPOStats | None = None
        self.prior: PriorData | None = None
        self.algorithm: Algorithm
        self.hindsight: HindsightLearner | None = None
        if config.algorithm == "hindsight":
            if bundle.robot_spec is None:
                raise LearnerConfigError(
                    "learning.algorithm 'hindsight' needs the bundle's robot spec (its "
                    "observation layout says where the goal and the end effector are)"
                )
            self.hindsight = HindsightLearner(
                bundle.build_actor().train(), config.hindsight, bundle.robot_spec, self.normalize
            )
            self.algorithm = self.hindsight
        elif config.algorithm == "ppo":
            self._ppo = ppo_from_bundle(bundle, config.effective_ppo())
            self.rollouts = Rollouts(arch.obs_dim, arch.act_dim, config.ppo.rollout_length)
            self.rollouts.follow(bundle.version.id, dict(bundle.actor_state))
            self.algorithm = self._ppo
        else:
            self._sac = sac_from_bundle(bundle, config.effective_sac())
            self._replay = ReplayBuffer(arch.obs_dim, arch.act_dim, config.replay)
            if config.prior.episodes > 0:
                raw = nominal_arm_transitions(bundle, config.prior.episodes, seed=config.prior.seed)
                self.prior = PriorData(self._normalized(raw), config.prior)
            self.algorithm = self._sac
        self.batch_size = config.sac.batch_size
        self.budget = 0.0  # updates earned by ingested transitions and not yet run

    @property
    def sac(self) -> SAC:
        """The SAC algorithm (SAC-specific callers: tests, SAC benchmarks)."""
        if self._sac is None:
            raise LearningError(f"the learner runs {self.config.algorithm!r}, not 'sac'")
        return self._sac

    @property
    def replay(self) -> ReplayBuffer:
        """SAC's replay buffer (PPO keeps none)."""
        if self._replay is None:
            raise LearningError(f"the learner runs {self.config.algorithm!r}: no replay buffer")
        return self._replay

    def know_versions(self, weights_of: Callable[[int], StateDict | None]) -> None:
        """Where the hindsight labels find the weights of the version that acted."""
        if self.hindsight is not None:
            self.hindsight.weights_of = weights_of

    @property
    def updates(self) -> int:
        """Updates the algorithm has run."""
        return self.algorithm.updates

    def follow(self, version: int, weights: StateDict) -> None:
        """``version`` (with ``weights``) is the deployed version the learner anchors on.

        PPO collects its rollouts from that version only (its partial rollout of the
        previous one is dropped); SAC learns off-policy from every version and ignores it."""
        if self.rollouts is not None:
            self.rollouts.follow(version, weights)

    def _normalized(self, rows: TransitionArrays) -> TransitionArrays:
        # Not ``_replace``: TransitionArrays overrides __len__ (rows), which NamedTuple's
        # _replace uses as its field count.
        columns = rows._asdict()
        # The safety supervisor is part of the environment the policy acts in, as in
        # pretraining: SAC learns the value of what the policy *proposed* (its correction
        # shows up in the next state and reward). A person's override is different: it is
        # a demonstration, so the action the robot executed is the one learned from.
        human = rows.action_sources == HUMAN_SOURCE_CODE
        actions = np.where(human[:, None], rows.actions, rows.proposed_actions)
        if self.frame is not None:
            # Robots record the absolute command they ran; a bundle whose actor steps from
            # the previous command learns the step that command was (its own output).
            actions = self.frame.outputs(rows.observations, actions)
        columns["actions"] = actions
        columns["observations"] = self.normalize(rows.observations)
        columns["next_observations"] = self.normalize(rows.next_observations)
        return TransitionArrays(**columns)

    def ingest(self, rows: TransitionArrays) -> TransitionArrays:
        """Store raw transitions; returns them normalized (as stored)."""
        normalized = self._normalized(rows)
        if self.hindsight is not None:
            self.hindsight.observe(rows)
            return normalized
        if self.rollouts is not None:
            self.rollouts.extend(normalized)
            return normalized
        self.replay.extend(normalized)
        if self.config.updates_per_transition is not None:
            self.budget += len(rows) * self.config.updates_per_transition
        return normalized

    def ready(self) -> bool:
        """SAC: whether the replay buffer holds one mini-batch of the robots' data; PPO:
        whether a full rollout waits or its updates are under way; hindsight: whether an
        episode is labelled."""
        if self.hindsight is not None:
            return self.hindsight.ready()
        if self.rollouts is not None:
            return self._schedule is not None or self.rollouts.full()
        return len(self.replay) >= self.batch_size

    def may_publish(self) -> bool:
        """Whether the learner's actor is worth proposing: SAC once its buffer holds a
        mini-batch; PPO once it has updated, also while it collects the next rollout
        (its updates come in bursts, one rollout at a time); hindsight likewise (its come
        with each labelled episode)."""
        if self.rollouts is not None or self.hindsight is not None:
            return self.algorithm.updates > 0
        return self.ready()

    def has_work(self) -> bool:
        """Whether :meth:`run_updates` would run at least one update now."""
        if self.hindsight is not None:
            return self.hindsight.ready() and self.hindsight.budget >= 1.0
        if self.rollouts is not None:
            return self.ready()
        unlimited = self.config.updates_per_transition is None
        return self.ready() and (unlimited or self.budget >= 1.0)

    def sample(self) -> TransitionBatch:
        """One mini-batch: the prior share (exact) from prior data, the rest from replay."""
        if self.prior is None:
            return self.replay.sample(self.batch_size)
        n_prior = self.prior.rows_in(self.batch_size)
        online = self.replay.sample(self.batch_size - n_prior)
        return concat_batches(online, self.prior.sample(n_prior)) if n_prior else online

    def update(self) -> TrainingStats:
        return self.sac.update(self.sample())

    def run_updates(self, most: int) -> int:
        """Up to ``most`` updates: SAC's the ratio has earned (``most`` of them when the
        ratio is unlimited), PPO's of the rollouts collected, hindsight's the labelled
        episodes have earned; returns how many ran."""
        if self.hindsight is not None:
            return self.hindsight.run_updates(most)
        if self.rollouts is not None:
            return self._run_ppo(most)
        if not self.ready():
            return 0
        unlimited = self.config.updates_per_transition is None
        n = most if unlimited else min(int(self.budget), most)
        for _ in range(n):
            self.update()
        if not unlimited:
            self.budget -= n
        return n

    def _run_ppo(self, most: int) -> int:
        assert self._ppo is not None
        assert self.rollouts is not None
        n = 0
        while n < most:
            if self._schedule is None:
                if not self.rollouts.full():
                    break
                _, behaviour, rows = self.rollouts.take()
                self._schedule = self._ppo.schedule(rows, behaviour)
            stats = next(self._schedule, None)
            if stats is None:
                self._schedule = None
                continue
            self.last_ppo_stats = stats
            if not stats.stopped:
                n += 1
        return n
