"""``arm_spec()``: the built-in arm's :class:`~tether.spec.RobotSpec`.

Every number comes from :data:`tether.sim.geometry.ARM` (the same numbers the MJCF is
built from) or is measured on the model (the deceleration limits, see ``braking.py``),
so the declared limits are the simulated ones.

The built-in arm can be commanded by torque or by joint position (``command_interface``);
:data:`DEFAULT_COMMAND_INTERFACE` is the one switch that says which one ``arm_spec()``
and ``ArmEnv()`` give when nobody asks for either.

Observation layout (float32, for ``n`` joints):
``[q (n, rad) | q̇ (n, rad/s) | end effector xyz (3, m) | target xyz (3, m)]``
(``obs_dim = 2n + 6``), and for the position interface then
``[command (n, rad) | command change (n, rad)]`` (``obs_dim = 4n + 6``): the joint target
the arm received last and its change from the one before, as a position-controlled
arm reports its commanded pose. A policy that steps from its previous command
(``tether.policy.action_frame``) reads them, and so does the scripted controller that
keeps within the supervisor's rate limits.
"""

from __future__ import annotations

import functools

from tether.sim.braking import derive_deceleration_limits
from tether.sim.geometry import ARM, POSITION_COMMAND_OVERREACH_RAD
from tether.spec import Box, CommandInterface, ObservationLayout, RobotSpec, Sphere

ARM_NAME = "tether-arm-4dof"

# The built-in arm's interface when none is asked for: every `arm_spec()`, every
# `ArmEnv()` (through ArmEnvConfig) and so every layer that builds the arm. Position:
# the shipped position policy passes its supervisor (docs/benchmarks.md, "Position arm").
DEFAULT_COMMAND_INTERFACE: CommandInterface = "position"


def arm_spec(command_interface: CommandInterface | None = None) -> RobotSpec:
    """The built-in arm's spec, commanded by ``command_interface`` (default
    :data:`DEFAULT_COMMAND_INTERFACE`); computed once per process and interface."""
    return _arm_spec(command_interface or DEFAULT_COMMAND_INTERFACE)


@functools.cache
def _arm_spec(command_interface: CommandInterface) -> RobotSpec:
    position = command_interface == "position"
    joints = tuple(link.joint for link in ARM.links)
    n = len(joints)
    names = (
        tuple(f"{j}_pos" for j in joints)
        + tuple(f"{j}_vel" for j in joints)
        + ("ee_x", "ee_y", "ee_z", "target_x", "target_y", "target_z")
        + (
            tuple(f"{j}_cmd" for j in joints) + tuple(f"{j}_cmd_change" for j in joints)
            if position
            else ()
        )
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
            command=(2 * n + 6, 3 * n + 6) if position else None,
            command_change=(3 * n + 6, 4 * n + 6) if position else None,
        ),
        joint_position_low_rad=tuple(link.position_low_rad for link in ARM.links),
        joint_position_high_rad=tuple(link.position_high_rad for link in ARM.links),
        joint_velocity_limit_rad_s=tuple(link.velocity_limit_rad_s for link in ARM.links),
        joint_acceleration_limit_rad_s2=_deceleration_limits(),
        torque_limit_nm=tuple(link.torque_limit_nm for link in ARM.links),
        home_position_rad=tuple(link.home_rad for link in ARM.links),
        workspace=Box(ARM.workspace_low_m, ARM.workspace_high_m, name="workspace"),
        obstacles=(Sphere(ARM.obstacle_center_m, ARM.obstacle_radius_m, name="obstacle"),),
        command_interface=command_interface,
        joint_stiffness_nm_rad=(
            tuple(link.stiffness_nm_rad for link in ARM.links) if position else ()
        ),
        joint_damping_nm_s_rad=(
            tuple(link.impedance_damping_nm_s_rad for link in ARM.links) if position else ()
        ),
        position_command_overreach_rad=POSITION_COMMAND_OVERREACH_RAD if position else 0.0,
    )


@functools.cache
def _deceleration_limits() -> tuple[float, ...]:
    # Measured on the arm's physics, which both interfaces share (~0.3 s): once.
    return derive_deceleration_limits(ARM)
