"""Errors of the data layer.

    TetherError
    └── DataError                 (tether.data: any failure of recording, logging or replay)
        ├── LogFormatError        (an experience-log directory or chunk that cannot be used)
        ├── ReplayStateError      (a replay state_dict that does not fit this buffer)
        └── ChannelError          (a transition channel that is closed or does not fit)

Messages name the thing, what was expected, what was found, and what to do.
"""

from __future__ import annotations

from tether.errors import TetherError


class DataError(TetherError):
    """Root of every error tether.data raises on purpose."""


class LogFormatError(DataError, ValueError):
    """An experience-log chunk or directory whose contents do not fit the log's format."""


class ReplayStateError(DataError, ValueError):
    """A replay buffer state (state_dict or file) whose shapes or fields do not fit."""


class ChannelError(DataError, RuntimeError):
    """A transition channel that is closed, unlinked, or built for other dimensions."""
