"""What every layer asks of the supervisor on a robot's action path, whatever its
command interface.

Serving's sessions, the client watchdog, the version gate's shadow and simulation
stages and ``tether run`` hold an :class:`ActionSupervisor`: the torque
:class:`~tether.safety.Supervisor` or the position supervisor in the policy's action
space (:class:`~tether.safety.position.PositionActionSupervisor`), as
:func:`tether.safety.for_spec.supervisor_for` picks for the robot's spec. Actions in and
out are the policy's normalized actions; each supervisor keeps one robot's state.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from tether.safety.limits import SafetyLimits
from tether.safety.verdict import SafetyVerdict


class ActionSupervisor(Protocol):
    """Filters one robot's normalized actions against ``limits``."""

    @property
    def limits(self) -> SafetyLimits: ...

    def filter(
        self,
        observation: Any,
        proposed_action: Any,
        previous_action: Any | None = None,
        *,
        observation_age_s: float | None = None,
    ) -> tuple[np.ndarray, SafetyVerdict]:
        """The action to execute (float32, shape (n,)) and what was done to it."""
        ...

    def backup_action(
        self, observation: Any, previous_action: Any | None = None
    ) -> tuple[np.ndarray, SafetyVerdict]:
        """The backup action for this state (TAKEOVER, a client watchdog's miss)."""
        ...

    def fresh(self) -> ActionSupervisor:
        """A supervisor of another robot under the same limits, with no robot state."""
        ...

    def with_limits(self, limits: SafetyLimits) -> ActionSupervisor:
        """The same supervisor enforcing ``limits``, with fresh robot state."""
        ...

    def take_state(self, other: Any) -> None:
        """Continue the robot ``other`` (a supervisor of the same kind) supervised."""
        ...
