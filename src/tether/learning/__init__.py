"""tether.learning: SAC, the learner process, what gets deployed, and pretraining.

- the algorithm: :class:`SAC` (``update(batch) -> TrainingStats``, ``actor_state()``,
  ``load_actor_state()``), configured by :class:`SACConfig`;
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
    from tether.learning.checkpoint import LearnerProgress, restore_checkpoint, save_checkpoint
    from tether.learning.config import SACConfig
    from tether.learning.errors import CheckpointError, LearnerProcessError, LearningError
    from tether.learning.evaluation import EvaluationResult, evaluate_actor
    from tether.learning.learner import Learner, LearnerCounters
    from tether.learning.learner_config import LearnerConfig
    from tether.learning.placement import LearnerPlacement, learner_placement
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
    "SAC",
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
    "PretrainConfig",
    "PretrainResult",
    "PublicationConfig",
    "PublishOutcome",
    "RecentStates",
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
