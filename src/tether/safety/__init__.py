"""tether.safety: the supervisor every action passes, and the degradation machine.

Public API (see docs/safety.md for the semantics of every check and level):

- limits: :class:`SafetyLimits` (``from_spec``, ``from_yaml``, ``tightened``), :class:`LimitsConfig`
- supervisor: :class:`Supervisor` (``filter``, ``backup_action``, ``with_limits``),
  :class:`SupervisorConfig`, :class:`Kinematics` (Protocol)
- verdicts: :class:`SafetyVerdict`, :class:`ActionSource`, :class:`SafetyCheck`
- backups: :class:`BackupConfig`, :class:`HoldBackup`, :class:`BrakeBackup`, :class:`GoHomeBackup`
- degradation: :class:`DegradationMachine`, :class:`DegradationConfig`, :class:`LevelThresholds`,
  :class:`DegradationLevel`, :class:`EventKind`, :class:`DegradationTransition`, :class:`WindowCounts`
- errors: :class:`SafetyError`, :class:`LimitsError`, :class:`DegradationError`
- commanded positions (:mod:`tether.safety.position`): :class:`PositionSupervisor`,
  :class:`PositionSupervisorConfig`, :class:`ImpedanceModel`, :class:`PositionVerdict`
"""

from typing import TYPE_CHECKING

from tether.lazy import lazy_exports

if TYPE_CHECKING:
    from tether.safety.backups import (
        Backup,
        BackupConfig,
        BrakeBackup,
        GoHomeBackup,
        HoldBackup,
        make_backup,
    )
    from tether.safety.degradation import DegradationMachine
    from tether.safety.degradation_config import DegradationConfig, LevelThresholds
    from tether.safety.errors import DegradationError, LimitsError, SafetyError
    from tether.safety.kinematics import Kinematics
    from tether.safety.levels import (
        DegradationLevel,
        DegradationTransition,
        EventKind,
        WindowCounts,
    )
    from tether.safety.limits import LimitsConfig, SafetyLimits
    from tether.safety.position import (
        ImpedanceModel,
        PositionSupervisor,
        PositionSupervisorConfig,
        PositionVerdict,
    )
    from tether.safety.supervisor import Supervisor, SupervisorConfig
    from tether.safety.verdict import PASSED, ActionSource, SafetyCheck, SafetyVerdict

__all__ = [
    "PASSED",
    "ActionSource",
    "Backup",
    "BackupConfig",
    "BrakeBackup",
    "DegradationConfig",
    "DegradationError",
    "DegradationLevel",
    "DegradationMachine",
    "DegradationTransition",
    "EventKind",
    "GoHomeBackup",
    "HoldBackup",
    "ImpedanceModel",
    "Kinematics",
    "LevelThresholds",
    "LimitsConfig",
    "LimitsError",
    "PositionSupervisor",
    "PositionSupervisorConfig",
    "PositionVerdict",
    "SafetyCheck",
    "SafetyError",
    "SafetyLimits",
    "SafetyVerdict",
    "Supervisor",
    "SupervisorConfig",
    "WindowCounts",
    "make_backup",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
