"""tether.learning: SAC, the learner process, what gets deployed, and pretraining.

- the algorithm: :class:`SAC` (``update(batch) -> TrainingStats``, ``actor_state()``,
  ``load_actor_state()``), configured by :class:`SACConfig`;
- the learner: :class:`Learner` (the loop), :class:`LearnerSupervisor` (its own process,
  restarted from :func:`save_checkpoint` checkpoints), :class:`LearnerConfig`,
  :func:`learner_placement`;
- deployment: :class:`PublicationConfig`, :class:`TrustRegion`, :func:`polyak_blend`;
- the learner-side gate: :class:`GateConfig` (``LearnerConfig.gate``), the verdict files
  the server reads (:func:`read_gate_verdicts`, :func:`list_gate_records`);
- pretraining: :func:`pretrain`, :class:`PretrainConfig`, :func:`evaluate_actor`.

See docs/learning.md.
"""

from tether.learning.checkpoint import LearnerProgress, restore_checkpoint, save_checkpoint
from tether.learning.config import SACConfig
from tether.learning.errors import (
    CheckpointError,
    GateInputError,
    LearnerProcessError,
    LearningError,
    VerdictFileError,
)
from tether.learning.evaluation import EvaluationResult, ObservationNormalizer, evaluate_actor
from tether.learning.gate import GateConfig, PromotionGate
from tether.learning.learner import Learner, LearnerCounters
from tether.learning.learner_config import LearnerConfig
from tether.learning.placement import LearnerPlacement, learner_placement
from tether.learning.pretrain import PretrainConfig, PretrainResult, pretrain
from tether.learning.process import (
    LearnerEvent,
    LearnerEventKind,
    LearnerSupervisor,
)
from tether.learning.publication import (
    PolicyDistance,
    PublicationConfig,
    PublishOutcome,
    RecentStates,
    TrustRegion,
    TrustRegionDecision,
    gaussian_kl,
    polyak_blend,
)
from tether.learning.sac import SAC, TrainingStats
from tether.learning.verdicts import (
    GateRecord,
    gate_record_versions,
    list_gate_records,
    read_gate_record,
    read_gate_verdicts,
)

__all__ = [
    "SAC",
    "CheckpointError",
    "EvaluationResult",
    "GateConfig",
    "GateInputError",
    "GateRecord",
    "Learner",
    "LearnerConfig",
    "LearnerCounters",
    "LearnerEvent",
    "LearnerEventKind",
    "LearnerPlacement",
    "LearnerProcessError",
    "LearnerProgress",
    "LearnerSupervisor",
    "LearningError",
    "ObservationNormalizer",
    "PolicyDistance",
    "PretrainConfig",
    "PretrainResult",
    "PromotionGate",
    "PublicationConfig",
    "PublishOutcome",
    "RecentStates",
    "SACConfig",
    "TrainingStats",
    "TrustRegion",
    "TrustRegionDecision",
    "VerdictFileError",
    "evaluate_actor",
    "gate_record_versions",
    "gaussian_kl",
    "learner_placement",
    "list_gate_records",
    "polyak_blend",
    "pretrain",
    "read_gate_record",
    "read_gate_verdicts",
    "restore_checkpoint",
    "save_checkpoint",
]
