"""tether.learning: SAC and PPO, the learner process, what gets deployed, and pretraining.

- the algorithms, behind one narrow interface (:class:`Algorithm`: ``actor_state()``,
  ``load_actor_state()``, ``updates`` ...; each has ``update(batch) -> stats``):
  :class:`SAC` (:class:`SACConfig`) and :class:`PPO` (:class:`PPOConfig`, fed by
  :class:`Rollouts` of one version); ``LearnerConfig.algorithm`` picks one;
- the learner: :class:`Learner` (the loop), :class:`LearnerProcess` (its own process,
  restarted from :func:`save_checkpoint` checkpoints), :class:`LearnerConfig`,
  :func:`learner_placement`;
- deployment: :class:`PublicationConfig`, :class:`TrustRegion`, :func:`polyak_blend`;
  the candidate it proposes is judged by the gate of ``tether.versions``;
- pretraining: :func:`tether.learning.pretrain.pretrain`, :class:`PretrainConfig`,
  :func:`evaluate_actor`.

See docs/learning.md.
"""

from typing import TYPE_CHECKING

from tether.lazy import lazy_exports

if TYPE_CHECKING:
    from tether.learning.algorithm import Algorithm
    from tether.learning.checkpoint import LearnerProgress, restore_checkpoint, save_checkpoint
    from tether.learning.config import PPOConfig, SACConfig
    from tether.learning.errors import CheckpointError, LearnerProcessError, LearningError
    from tether.learning.evaluation import EvaluationResult, evaluate_actor
    from tether.learning.learner import Learner, LearnerCounters
    from tether.learning.learner_config import LearnerConfig
    from tether.learning.placement import LearnerPlacement, learner_placement
    from tether.learning.ppo import PPO, PPOBatch, PPOStats, Rollouts
    from tether.learning.pretrain import PretrainConfig, PretrainResult
    from tether.learning.process import (
        LearnerEvent,
        LearnerEventKind,
        LearnerProcess,
    )
    from tether.learning.publication import (
        PublicationConfig,
        PublishOutcome,
        RecentStates,
        TrustRegion,
        TrustRegionDecision,
        polyak_blend,
    )
    from tether.learning.sac import SAC, TrainingStats

__all__ = [
    "PPO",
    "SAC",
    "Algorithm",
    "CheckpointError",
    "EvaluationResult",
    "Learner",
    "LearnerConfig",
    "LearnerCounters",
    "LearnerEvent",
    "LearnerEventKind",
    "LearnerPlacement",
    "LearnerProcess",
    "LearnerProcessError",
    "LearnerProgress",
    "LearningError",
    "PPOBatch",
    "PPOConfig",
    "PPOStats",
    "PretrainConfig",
    "PretrainResult",
    "PublicationConfig",
    "PublishOutcome",
    "RecentStates",
    "Rollouts",
    "SACConfig",
    "TrainingStats",
    "TrustRegion",
    "TrustRegionDecision",
    "evaluate_actor",
    "learner_placement",
    "polyak_blend",
    "restore_checkpoint",
    "save_checkpoint",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
