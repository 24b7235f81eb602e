"""Torque-command safety settings for the built-in arm (``tether.sim``), ready to use
(its position-command settings are ``tether.safety.position.presets``).

The arm's declared acceleration limits are the decelerations it can *guarantee* in its
rated envelope (see ``tether.sim.braking``); its motors can accelerate a joint far
faster than that. The supervisor needs an upper bound of that too
(``acceleration_per_action_rad_s2``). Sampling ``|M(q)⁻¹|·τ_max`` over the joint range
gives 22-45 times the declared limit per joint; with the +10 % actuator gain domain
randomization allows, 60 bounds every joint (``tests/safety/test_presets.py`` re-measures
it on the MuJoCo model, so a change of the arm that breaks the bound fails a test).

The arm declares no limit on *commanded* acceleration: its one acceleration figure is
the deceleration braking may rely on, and capping commands at it would cut every action
of a competent policy to a tenth. So the preset caps commanded acceleration at what the actuators can produce at all, a full
action against a full holding load (``|u − u_gravity| ≤ 2``, i.e. twice the per-action
bound): at NORMAL the ACCELERATION check never binds inside the torque limit, and the
RESTRICTED level's tightening (× 0.5 by default) brings it down to one full action
beyond gravity compensation. Braking is unaffected: it relies only on
``braking_deceleration_rad_s2`` (half the declared limit).

The arm's joints are viscously damped (``Link.damping_nm_s``: full torque alone drives a
joint to only twice its velocity limit). Without that in the one-step model, the fast
gain above lets the VELOCITY bound allow only a small fraction of a full action even at
standstill, and the supervisor would correct most of a competent policy's steps. The preset
declares the *smallest* damping the arm may have as a normalized torque: the lowest
damping multiplier pretraining's domain randomization draws (0.8; no drift preset
lowers damping, and more damping is the safe direction), divided by the highest
actuator gain (1.1), since actions are scaled by the gain and damping is not.
"""

from __future__ import annotations

from tether.safety.limits import LimitsConfig, SafetyLimits
from tether.safety.supervisor import Supervisor, SupervisorConfig
from tether.sim import ArmKinematics, DomainRandomization, arm_spec
from tether.sim.geometry import ARM

ARM_ACCELERATION_PER_ACTION_SCALE = 60.0
# The largest normalized torque beyond gravity compensation: a full action against a
# gravity (or learnt) load of at most a full action, which is all the actuators can hold.
_LARGEST_PUSH = 2.0
ARM_ACCELERATION_LIMIT_SCALE = _LARGEST_PUSH * ARM_ACCELERATION_PER_ACTION_SCALE
# The one-step model treats the joints one by one: another joint's torque reaching this
# one through the off-diagonal inertia, and the Coriolis terms of a fast joint, are not
# in it. With two joints chattering at full torque near their limits, that coupling can
# carry the forearm centimetres past the predicted clearance, beyond the 3 cm default
# margin (tests/safety/test_pretrained_policy.py keeps the shipped policy clear of the
# obstacle with this margin); a coupled model (the full M(q)^-1 and bias(q, q-dot)) is
# the fix that would not need it.
ARM_OBSTACLE_MARGIN_M = 0.06
ARM_LIMITS_CONFIG = LimitsConfig(
    acceleration_per_action_scale=ARM_ACCELERATION_PER_ACTION_SCALE,
    acceleration_limit_scale=ARM_ACCELERATION_LIMIT_SCALE,
    obstacle_margin_m=ARM_OBSTACLE_MARGIN_M,
)


def arm_damping_per_rad_s() -> tuple[float, ...]:
    """The smallest viscous damping of each of the arm's joints, in normalized torque per
    rad/s, over every dynamics the arm is randomized or drifted to (see the docstring)."""
    ranges = DomainRandomization.default()
    fraction = ranges.joint_damping[0] / ranges.actuator_gain[1]
    return tuple(fraction * link.damping_nm_s / link.torque_limit_nm for link in ARM.links)


def arm_limits(config: LimitsConfig = ARM_LIMITS_CONFIG) -> SafetyLimits:
    """The built-in arm's safety limits (pass a config built from ``ARM_LIMITS_CONFIG``)."""
    return SafetyLimits.from_spec(
        arm_spec("torque"), config, viscous_damping_per_rad_s=arm_damping_per_rad_s()
    )


def arm_supervisor(
    limits: SafetyLimits | None = None, config: SupervisorConfig | None = None
) -> Supervisor:
    """A supervisor for the built-in arm with its MuJoCo kinematics (obstacle, workspace)."""
    return Supervisor(
        limits or arm_limits(), kinematics=ArmKinematics(arm_spec("torque")), config=config
    )
