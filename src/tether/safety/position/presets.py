"""Position-command safety settings for the built-in arm (``tether.sim``), ready to use.

The position supervisor reads these fields of :class:`SafetyLimits`: the joint range and
its margins, ``velocity_limit_rad_s`` (per-step change), ``acceleration_limit_rad_s2``
(change of that change, and the braking curve toward the range's ends),
``torque_limit_nm``, the workspace, obstacles and their margins,
``command_staleness_s`` and ``home_position_rad``; the rest belong to the torque
supervisor's model and are ignored.

The commanded acceleration is capped at the arm's declared acceleration limit, which
``tether.sim`` declares as the deceleration the arm can *guarantee* inside its rated
envelope (weakest actuator gain, heaviest payload): a command never asks the arm to
stop faster than it surely can, so the arm can follow the command's braking curve to
rest inside the range. The obstacle margin is the torque preset's 6 cm
(``ARM_OBSTACLE_MARGIN_M``): what the segment from the measured to the commanded pose
leaves out (the arm's momentum, tracking overshoot, the curved true path) has to fit in
it.
"""

from __future__ import annotations

from tether.safety.limits import LimitsConfig, SafetyLimits
from tether.safety.position.impedance import ARM_IMPEDANCE, ImpedanceModel
from tether.safety.position.supervisor import PositionSupervisor, PositionSupervisorConfig
from tether.safety.presets import ARM_OBSTACLE_MARGIN_M
from tether.sim import ArmKinematics, arm_spec

ARM_POSITION_LIMITS_CONFIG = LimitsConfig(
    acceleration_limit_scale=1.0,
    obstacle_margin_m=ARM_OBSTACLE_MARGIN_M,
)


def arm_position_limits(config: LimitsConfig = ARM_POSITION_LIMITS_CONFIG) -> SafetyLimits:
    """The built-in arm's limits for commanded positions."""
    return SafetyLimits.from_spec(arm_spec(), config)


def arm_position_supervisor(
    limits: SafetyLimits | None = None,
    impedance: ImpedanceModel = ARM_IMPEDANCE,
    config: PositionSupervisorConfig | None = None,
) -> PositionSupervisor:
    """A position supervisor for the built-in arm with its MuJoCo kinematics."""
    return PositionSupervisor(
        limits or arm_position_limits(),
        impedance,
        kinematics=ArmKinematics(arm_spec()),
        config=config,
    )
