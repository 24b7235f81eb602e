"""``arm_spec()``: the built-in arm's :class:`~tether.spec.RobotSpec`.

Every number comes from :data:`tether.sim.geometry.ARM` (the same numbers the MJCF is
built from) or is measured on the model (the deceleration limits, see ``braking.py``),
so the declared limits are the simulated ones.

Observation layout (float32, ``obs_dim = 2n + 6`` for ``n`` joints):
``[q (n, rad) | q̇ (n, rad/s) | end effector xyz (3, m) | target xyz (3, m)]``.
"""

from __future__ import annotations

import functools

from tether.sim.braking import derive_deceleration_limits
from tether.sim.geometry import ARM
from tether.spec import Box, ObservationLayout, RobotSpec, Sphere

ARM_NAME = "tether-arm-4dof"


@functools.cache
def arm_spec() -> RobotSpec:
    """The built-in arm's spec (computed once per process; the spec is immutable)."""
    joints = tuple(link.joint for link in ARM.links)
    n = len(joints)
    names = (
        tuple(f"{j}_pos" for j in joints)
        + tuple(f"{j}_vel" for j in joints)
        + ("ee_x", "ee_y", "ee_z", "target_x", "target_y", "target_z")
    )
    return RobotSpec(
        name=ARM_NAME,
        joint_names=joints,
        control_period_s=ARM.control_period_s,
        observation_names=names,
        layout=ObservationLayout(
            joint_position=(0, n),
            joint_velocity=(n, 2 * n),
            end_effector=(2 * n, 2 * n + 3),
            target=(2 * n + 3, 2 * n + 6),
        ),
        joint_position_low_rad=tuple(link.position_low_rad for link in ARM.links),
        joint_position_high_rad=tuple(link.position_high_rad for link in ARM.links),
        joint_velocity_limit_rad_s=tuple(link.velocity_limit_rad_s for link in ARM.links),
        joint_acceleration_limit_rad_s2=derive_deceleration_limits(ARM),
        torque_limit_nm=tuple(link.torque_limit_nm for link in ARM.links),
        home_position_rad=tuple(link.home_rad for link in ARM.links),
        workspace=Box(ARM.workspace_low_m, ARM.workspace_high_m, name="workspace"),
        obstacles=(Sphere(ARM.obstacle_center_m, ARM.obstacle_radius_m, name="obstacle"),),
    )
