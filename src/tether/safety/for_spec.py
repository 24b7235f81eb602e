"""What the supervisor enforces for a robot spec, decided in one place.

The built-in arm gets its presets (for position commands
``tether.safety.position.presets``, for torque commands ``tether.safety.presets``) and
its MuJoCo kinematics (obstacle and workspace checks); any other robot gets
``SafetyLimits.from_spec`` and joint checks only. A position-commanded spec gets the
position supervisor in its action space (:class:`PositionActionSupervisor`, with the
impedance gains the spec declares); a torque-commanded one the torque
:class:`Supervisor`. The server, the version gate's shadow stage, the client watchdog,
the learner's simulation stage and ``tether run`` all ask here, so they can never
disagree on which limits or which supervisor apply. :class:`SupervisionConfig` is what
a deployment sets besides the limits (a server config's ``supervision``: the backup,
the way out of a margin), which a server announces to its robots' watchdogs.

``tether.sim`` is imported only when asked about the arm, so a client install that
supervises another robot does not load MuJoCo.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

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


class SupervisionConfig(BaseModel):
    """What a robot's safety supervisor does besides enforcing its limits (which come
    from the robot spec, or a limits file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backup: BackupConfig = Field(
        default_factory=BackupConfig,
        description="The action a session gets in place of an unusable or stale proposal "
        "or observation, and at TAKEOVER: hold (the previous command held; a torque robot "
        "damped to standstill), brake (stop where the arm is) or go_home (slowly to the "
        "spec's home pose), each through every check like a policy action",
    )
    way_out: bool = Field(
        default=True,
        description="A position-commanded robot more than 2 cm inside a breached margin (a "
        "hand left it there) has the command that would be held moved part of the way out, "
        "step after step, at any degradation level, TAKEOVER's hold included; off: the "
        "command is held, and the arm moves only where a command takes it",
    )


def supervisor_for(
    spec: RobotSpec,
    limits: SafetyLimits | None = None,
    *,
    config: SupervisorConfig | None = None,
    kinematics: Kinematics | None = None,
    supervision: SupervisionConfig | None = None,
) -> ActionSupervisor:
    """A supervisor for one robot of ``spec`` on its normalized actions: ``limits``
    (default :func:`limits_for`) and ``kinematics`` (default :func:`kinematics_for`).
    ``config`` is the torque supervisor's (a position spec refuses one); ``supervision``
    (default: :class:`SupervisionConfig`'s defaults) is either interface's, its backup
    replacing ``config``'s."""
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
            config=None
            if supervision is None
            else PositionSupervisorConfig(backup=supervision.backup, way_out=supervision.way_out),
        )
        return PositionActionSupervisor(position, spec)
    if supervision is not None:
        config = (config or SupervisorConfig()).model_copy(update={"backup": supervision.backup})
    return Supervisor(limits, kinematics=kinematics, config=config)
