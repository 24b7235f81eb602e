"""tether.safety.position: the supervisor for commanded joint positions.

- :class:`PositionSupervisor` (``filter``, ``backup_action``, ``with_limits``,
  ``take_state``), :class:`PositionSupervisorConfig`
- :class:`PositionActionSupervisor`: the same on a policy's normalized actions, through
  the spec's action map (what serving runs for a position-commanded robot)
- :class:`ImpedanceModel` (``from_spec``): the gains of the robot's impedance law
- :class:`PositionVerdict`: a :class:`~tether.safety.SafetyVerdict` with how far each
  check moved the command
- backups: :class:`HoldCommand`, :class:`BrakeCommand`, :class:`GoHomeCommand`
- ``tether.safety.position.kernel``: the compiled arithmetic (numba; Python fallback);
  ``tether.safety.position.batch``: ``filter_commands``/``filter_actions`` for many robots
  (their robots' state in arrays: ``tether.safety.position.states``)

``tether.safety.position.presets`` holds the built-in arm's settings (it imports
``tether.sim``). See docs/safety.md, "Commanded positions".
"""

from tether.safety.position.actions import PositionActionSupervisor
from tether.safety.position.backups import (
    BrakeCommand,
    CommandBackup,
    GoHomeCommand,
    HoldCommand,
    make_command_backup,
)
from tether.safety.position.envelope import CommandEnvelope, JointResult
from tether.safety.position.impedance import ImpedanceModel
from tether.safety.position.supervisor import PositionSupervisor, PositionSupervisorConfig
from tether.safety.position.verdict import PositionVerdict

__all__ = [
    "BrakeCommand",
    "CommandBackup",
    "CommandEnvelope",
    "GoHomeCommand",
    "HoldCommand",
    "ImpedanceModel",
    "JointResult",
    "PositionActionSupervisor",
    "PositionSupervisor",
    "PositionSupervisorConfig",
    "PositionVerdict",
    "make_command_backup",
]
