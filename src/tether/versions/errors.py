"""The versions layer's exceptions: one root, :class:`VersionError`.

No grpc here: the edge maps each class to the status code a client receives, in one
table (``tether.serving.errors.status_code``). Messages name the version, what was
expected, what was found, and what to do.

    TetherError
    └── VersionError                    a version that cannot do what was asked
        ├── IllegalTransition           a state change the transition table does not allow
        ├── VersionUnavailable          a request pinned to a version that may not serve it
        │   └── UnknownVersion          an id never seen, or whose engine is unloaded
        ├── NoPolicyLoaded              nothing is live yet (retry later)
        ├── VerdictFileError            a gate verdict file that cannot be read back
        └── GateInputError              engines whose served weights are not the ones judged
"""

from __future__ import annotations

from tether.errors import TetherError


class VersionError(TetherError):
    """Root of every error raised by ``tether.versions``."""


class IllegalTransition(VersionError):
    """A state change the transition table does not allow."""


class VersionUnavailable(VersionError):
    """A request pinned to a policy version the server does not serve."""


class UnknownVersion(VersionUnavailable):
    """A version id the registry has never seen, or whose engine is unloaded."""


class NoPolicyLoaded(VersionError):
    """No verified policy is live; clients should retry later."""


class VerdictFileError(VersionError):
    """A gate verdict file that is malformed or misnamed."""


class GateInputError(VersionError):
    """The gate was handed an engine it cannot judge faithfully."""
