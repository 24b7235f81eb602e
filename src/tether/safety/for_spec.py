"""What the supervisor enforces for a robot spec, decided in one place.

The built-in arm gets its presets (``tether.safety.presets``: its fast actuators, its
damping, its obstacle margin) and its MuJoCo kinematics (obstacle and workspace
checks); any other robot gets ``SafetyLimits.from_spec`` and joint checks only. The
server, the version gate's shadow stage, the client watchdog, the learner's
simulation stage and ``tether run`` all ask here, so they can never disagree on
which limits apply.

``tether.sim`` is imported only when asked about the arm, so a client install that
supervises another robot does not load MuJoCo.
"""

from __future__ import annotations

from tether.safety.kinematics import Kinematics
from tether.safety.limits import SafetyLimits
from tether.safety.supervisor import Supervisor, SupervisorConfig
from tether.spec import RobotSpec


def is_builtin_arm(spec: RobotSpec) -> bool:
    """Whether ``spec`` is the built-in arm (same fingerprint: dims and joint names)."""
    from tether.sim import arm_spec

    return spec.fingerprint() == arm_spec().fingerprint()


def limits_for(spec: RobotSpec) -> SafetyLimits:
    """The limits to enforce for ``spec``: the arm's preset for the built-in arm, else
    ``SafetyLimits.from_spec(spec)``."""
    if is_builtin_arm(spec):
        from tether.safety.presets import arm_limits

        return arm_limits()
    return SafetyLimits.from_spec(spec)


def kinematics_for(spec: RobotSpec) -> Kinematics | None:
    """The built-in arm's kinematics when ``spec`` is that arm, else None (joint checks only)."""
    if is_builtin_arm(spec):
        from tether.sim import ArmKinematics

        return ArmKinematics()
    return None


def supervisor_for(
    spec: RobotSpec,
    limits: SafetyLimits | None = None,
    *,
    config: SupervisorConfig | None = None,
) -> Supervisor:
    """A supervisor for one robot of ``spec``: ``limits`` (default :func:`limits_for`) and
    :func:`kinematics_for`."""
    return Supervisor(
        limits if limits is not None else limits_for(spec),
        kinematics=kinematics_for(spec),
        config=config,
    )
