"""The learning layer's exceptions: one root, :class:`LearningError`.

TetherError
└── LearningError
    ├── CheckpointError     a learner checkpoint that is missing, partial or mismatched
    ├── LearnerConfigError  a learner configuration the bundle cannot be learned with
    └── LearnerProcessError the learner process could not be started or kept alive
"""

from __future__ import annotations

from tether.errors import TetherError


class LearningError(TetherError):
    """Base class of every error the learning layer raises on purpose."""


class CheckpointError(LearningError):
    """A learner checkpoint that cannot be written or restored."""


class LearnerProcessError(LearningError):
    """The learner process could not be started, or keeps crashing."""


class LearnerConfigError(LearningError):
    """A learner configuration that does not fit the bundle or the robot (says which)."""
