"""What the supervisor enforces for a robot spec, decided in one place.

The built-in arm gets its presets (for position commands
``tether.safety.position.presets``, for torque commands ``tether.safety.presets``) and
its MuJoCo kinematics (obstacle and workspace checks); any other robot gets
``SafetyLimits.from_spec`` and joint checks only. A position-commanded spec gets the
position supervisor in its action space (:class:`PositionActionSupervisor`, with the
impedance gains the spec declares); a torque-commanded one the torque
:class:`Supervisor`. The server, the version gate's shadow stage, the client watchdog,
the learner's simulation stage and ``tether run`` all ask here, so they can never
disagree on which limits or which supervisor apply.

``tether.sim`` is imported only when asked about the arm, so a client install that
supervises another robot does not load MuJoCo.
"""

from __future__ import annotations

from tether.safety.backups import BackupConfig
from tether.safety.errors import LimitsError
from tether.safety.kinematics import Kinematics
from tether.safety.limits import SafetyLimits
from tether.safety.supervises import ActionSupervisor
from tether.safety.supervisor import Supervisor, SupervisorConfig
from tether.spec import COMMAND_INTERFACES, RobotSpec


def is_builtin_arm(spec: RobotSpec) -> bool:
    """Whether ``spec`` is the built-in arm under either of its command interfaces (same
    fingerprint: dims, joint names and interface)."""
    from tether.sim import arm_spec

    fingerprint = spec.fingerprint()
    return any(fingerprint == arm_spec(ci).fingerprint() for ci in COMMAND_INTERFACES)


def limits_for(spec: RobotSpec) -> SafetyLimits:
    """The limits to enforce for ``spec``: the arm's preset for its interface for the
    built-in arm, else ``SafetyLimits.from_spec(spec)``."""
    if is_builtin_arm(spec):
        if spec.command_interface == "position":
            from tether.safety.position.presets import arm_position_limits

            return arm_position_limits()
        from tether.safety.presets import arm_limits

        return arm_limits()
    return SafetyLimits.from_spec(spec)


def kinematics_for(spec: RobotSpec) -> Kinematics | None:
    """The built-in arm's kinematics when ``spec`` is that arm, else None (joint checks only)."""
    if is_builtin_arm(spec):
        from tether.sim import ArmKinematics

        return ArmKinematics()
    return None


def unchecked_cartesian(
    spec: RobotSpec, limits: SafetyLimits, kinematics: Kinematics | None
) -> str | None:
    """What ``limits`` declare that no supervisor of ``spec`` checks, in words: a workspace
    and obstacles where there are no kinematics to place the robot's body; else None."""
    if kinematics is not None or (limits.workspace is None and not limits.obstacles):
        return None
    declared = [
        *(["a workspace"] if limits.workspace is not None else []),
        *([f"{len(limits.obstacles)} obstacle(s)"] if limits.obstacles else []),
    ]
    return (
        f"robot {spec.name!r} declares {' and '.join(declared)}, but tether has no kinematics "
        "for it: the supervisor checks its joints (range, speed, acceleration, torque) and "
        "nothing keeps its body inside the workspace or clear of the obstacles"
    )


def supervisor_for(
    spec: RobotSpec,
    limits: SafetyLimits | None = None,
    *,
    config: SupervisorConfig | None = None,
    kinematics: Kinematics | None = None,
    backup: BackupConfig | None = None,
) -> ActionSupervisor:
    """A supervisor for one robot of ``spec`` on its normalized actions: ``limits``
    (default :func:`limits_for`) and ``kinematics`` (default :func:`kinematics_for`).
    ``config`` is the torque supervisor's (a position spec refuses one); ``backup``
    (default: hold) is either interface's, and replaces ``config``'s."""
    limits = limits if limits is not None else limits_for(spec)
    kinematics = kinematics if kinematics is not None else kinematics_for(spec)
    if spec.command_interface == "position":
        if config is not None:
            raise LimitsError(
                f"supervisor_for: config is the torque supervisor's SupervisorConfig, and "
                f"{spec.name!r} is commanded by position; leave config unset"
            )
        from tether.safety.position.actions import PositionActionSupervisor
        from tether.safety.position.impedance import ImpedanceModel
        from tether.safety.position.supervisor import PositionSupervisor, PositionSupervisorConfig

        position = PositionSupervisor(
            limits,
            ImpedanceModel.from_spec(spec),
            kinematics=kinematics,
            config=None if backup is None else PositionSupervisorConfig(backup=backup),
        )
        return PositionActionSupervisor(position, spec)
    if backup is not None:
        config = (config or SupervisorConfig()).model_copy(update={"backup": backup})
    return Supervisor(limits, kinematics=kinematics, config=config)
