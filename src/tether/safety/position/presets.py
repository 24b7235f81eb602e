"""Position-command safety settings for the built-in arm (``tether.sim``), ready to use.

The position supervisor reads these fields of :class:`SafetyLimits`: the joint range and
its margins, ``velocity_limit_rad_s`` (per-step change), ``acceleration_limit_rad_s2``
(change of that change, and the braking curve toward the range's ends),
``torque_limit_nm``, the workspace, obstacles and their margins,
``command_staleness_s`` and ``home_position_rad``; the rest belong to the torque
supervisor's model and are ignored. Its impedance gains are the ones the arm's spec
declares (``ImpedanceModel.from_spec``), which the simulated controller is built from.

The braking curve toward the range's ends relies on the arm's declared acceleration
limit (``braking_fraction`` 1), which ``tether.sim`` declares as the deceleration the arm
can *guarantee* inside its rated envelope (weakest actuator gain, heaviest payload): a
command never asks the arm to stop faster than it surely can, so the arm can follow the
command's braking curve to rest inside the range. The command's own acceleration (the
change of its change) is capped at the same limit (``ARM_COMMAND_ACCELERATION_SCALE``
1): a command that speeds up faster than the weakest rated arm can follow leaves that
arm lagging off the checked segment, and on the fully drifted arm a random command
policy then touched the obstacle and a joint limit (scale 4: 78-160 contact steps in
10,000; scale 1: none; docs/safety.md).
The obstacle margin is the torque preset's 6 cm
(``ARM_OBSTACLE_MARGIN_M``): what the segment from the measured to the commanded pose
leaves out (the arm's momentum, tracking overshoot, the curved true path) has to fit in
it.
"""

from __future__ import annotations

from tether.safety.limits import LimitsConfig, SafetyLimits
from tether.safety.position.actions import PositionActionSupervisor
from tether.safety.position.impedance import ImpedanceModel
from tether.safety.position.supervisor import PositionSupervisor, PositionSupervisorConfig
from tether.safety.presets import ARM_OBSTACLE_MARGIN_M
from tether.sim import ArmKinematics, arm_spec

ARM_COMMAND_ACCELERATION_SCALE = 1.0
# The command is kept this far inside each joint's range: the weakest rated arm (gain
# 0.6, 0.5 kg payload, a step of delay) overshoots a command braking onto the default
# 0.05 rad margin by enough to reach its limit (7-14 violation steps in 10,000 of a
# random command policy; none at 0.1, docs/safety.md).
ARM_POSITION_MARGIN_RAD = 0.1
ARM_POSITION_LIMITS_CONFIG = LimitsConfig(
    position_margin_rad=ARM_POSITION_MARGIN_RAD,
    acceleration_limit_scale=ARM_COMMAND_ACCELERATION_SCALE,
    braking_fraction=1.0,
    obstacle_margin_m=ARM_OBSTACLE_MARGIN_M,
)


def arm_position_limits(config: LimitsConfig = ARM_POSITION_LIMITS_CONFIG) -> SafetyLimits:
    """The built-in arm's limits for commanded positions."""
    return SafetyLimits.from_spec(arm_spec("position"), config)


def arm_impedance() -> ImpedanceModel:
    """The gains of the built-in arm's impedance controller, as its spec declares them."""
    return ImpedanceModel.from_spec(arm_spec("position"))


def arm_position_supervisor(
    limits: SafetyLimits | None = None,
    impedance: ImpedanceModel | None = None,
    config: PositionSupervisorConfig | None = None,
) -> PositionSupervisor:
    """A position supervisor for the built-in arm with its MuJoCo kinematics, on joint
    targets in rad."""
    return PositionSupervisor(
        limits or arm_position_limits(),
        impedance or arm_impedance(),
        kinematics=ArmKinematics(arm_spec("position")),
        config=config,
    )


def arm_action_supervisor(
    limits: SafetyLimits | None = None, config: PositionSupervisorConfig | None = None
) -> PositionActionSupervisor:
    """The built-in arm's position supervisor on the policy's normalized actions (what
    serving runs for it)."""
    return PositionActionSupervisor(
        arm_position_supervisor(limits, config=config), arm_spec("position")
    )
