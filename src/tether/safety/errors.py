"""The safety layer's exceptions, all under one root.

    TetherError
    └── SafetyError                 (anything tether.safety refuses on purpose)
        ├── LimitsError             (inconsistent or unusable SafetyLimits / limits YAML)
        └── DegradationError        (a DegradationMachine call that cannot be honoured)

``Supervisor.filter`` never raises on bad observations or actions: those become a
flagged backup action. These exceptions are for construction and operator calls.
"""

from __future__ import annotations

from tether.errors import TetherError


class SafetyError(TetherError):
    """Root of every error the safety layer raises."""


class LimitsError(SafetyError, ValueError):
    """Limits that contradict each other, or a limits file that cannot be read."""


class DegradationError(SafetyError):
    """A degradation-machine request that cannot be honoured (e.g. resume without an operator)."""
