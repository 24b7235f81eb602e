"""The learner's core: what happens to a transition between the channel and an update.

:class:`LearnerCore` normalizes incoming transitions with the bundle's normalizer (the
engine's own function), learns the policy's *proposed* action unless a person overrode
it (mapped into the actor's output space when the bundle has an action frame), stores
them in the replay buffer (its recent/older mix), mixes prior data into each
batch when configured (``LearnerConfig.prior``), and runs SAC updates at the
update-to-data ratio. With ``LearnerConfig.algorithm == "hindsight"`` the updates are
instead the goal shift's regression on finished episodes
(:class:`tether.learning.hindsight.HindsightLearner`, fed the same raw transitions; it
trains the goal shift of ``sac.actor``, the actor every caller publishes from), and the
critics are not trained. It knows nothing of processes, shared weights, pacing or the
gate: :class:`tether.learning.Learner` wraps it for ``tether run``, and
``benchmarks/bench_adaptation.py`` drives the same object from a simulated arm, so the
benchmark measures the recipe ``tether run`` runs.

Invariant: with prior data, each batch holds exactly ``PriorData.rows_in(batch_size)``
prior rows and the rest from the replay buffer; the replay buffer holds only the
robots' transitions.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tether.data.columns import TransitionArrays
from tether.data.records import TransitionBatch
from tether.data.replay.buffer import ReplayBuffer
from tether.data.step import HUMAN_SOURCE_CODE
from tether.learning.errors import LearnerConfigError
from tether.learning.hindsight import HindsightLearner
from tether.learning.learner_config import LearnerConfig
from tether.learning.prior import PriorData, concat_batches, nominal_arm_transitions
from tether.learning.sac import SAC, TrainingStats, sac_from_bundle
from tether.policy.bundle import PolicyBundle
from tether.policy.tensors import StateDict
from tether.policy.transforms import ObservationNormalizer


class LearnerCore:
    """SAC, its replay buffer and its prior data; fed raw transitions, runs updates."""

    def __init__(self, bundle: PolicyBundle, config: LearnerConfig) -> None:
        self.config = config
        self.sac: SAC = sac_from_bundle(bundle, config.effective_sac())
        self.normalize = ObservationNormalizer(bundle.manifest.normalizer)
        self.frame = bundle.manifest.action.frame
        arch = bundle.architecture
        self.replay = ReplayBuffer(arch.obs_dim, arch.act_dim, config.replay)
        self.prior: PriorData | None = None
        if config.prior.episodes > 0:
            raw = nominal_arm_transitions(bundle, config.prior.episodes, seed=config.prior.seed)
            self.prior = PriorData(self._normalized(raw), config.prior)
        self.batch_size = config.sac.batch_size
        self.budget = 0.0  # updates earned by ingested transitions and not yet run
        self.hindsight: HindsightLearner | None = None
        if config.algorithm == "hindsight":
            if bundle.robot_spec is None:
                raise LearnerConfigError(
                    "learning.algorithm 'hindsight' needs the bundle's robot spec (its "
                    "observation layout says where the goal and the end effector are)"
                )
            self.hindsight = HindsightLearner(
                self.sac.actor, config.hindsight, bundle.robot_spec, self.normalize
            )

    def know_versions(self, weights_of: Callable[[int], StateDict | None]) -> None:
        """Where the hindsight labels find the weights of the version that acted."""
        if self.hindsight is not None:
            self.hindsight.weights_of = weights_of

    @property
    def updates(self) -> int:
        """Updates run so far (SAC's, or the goal shift's under hindsight)."""
        return self.sac.updates if self.hindsight is None else self.hindsight.updates

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
        self.replay.extend(normalized)
        if self.hindsight is not None:
            self.hindsight.observe(rows)
            return normalized
        if self.config.updates_per_transition is not None:
            self.budget += len(rows) * self.config.updates_per_transition
        return normalized

    def ready(self) -> bool:
        """Whether the replay buffer holds one mini-batch of the robots' data (under
        hindsight: one labelled episode)."""
        if self.hindsight is not None:
            return self.hindsight.ready()
        return len(self.replay) >= self.batch_size

    def sample(self) -> TransitionBatch:
        """One mini-batch: the prior share (exact) from prior data, the rest from replay."""
        if self.prior is None:
            return self.replay.sample(self.batch_size)
        n_prior = self.prior.rows_in(self.batch_size)
        online = self.replay.sample(self.batch_size - n_prior)
        return concat_batches(online, self.prior.sample(n_prior)) if n_prior else online

    def update(self) -> TrainingStats:
        return self.sac.update(self.sample())

    def earned(self) -> bool:
        """Whether an update is owed now (the update-to-data ratio's budget, or the
        labelled episodes' under hindsight)."""
        if self.hindsight is not None:
            return self.hindsight.budget >= 1.0
        return self.config.updates_per_transition is None or self.budget >= 1.0

    def run_updates(self, most: int) -> int:
        """Up to ``most`` updates the ratio has earned (``most`` of them when the ratio is
        unlimited); returns how many ran."""
        if self.hindsight is not None:
            return self.hindsight.run_updates(most)
        if not self.ready():
            return 0
        unlimited = self.config.updates_per_transition is None
        n = most if unlimited else min(int(self.budget), most)
        for _ in range(n):
            self.update()
        if not unlimited:
            self.budget -= n
        return n
