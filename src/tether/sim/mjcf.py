"""Builds the arm's MuJoCo model from :data:`tether.sim.geometry.ARM`.

The MJCF text is generated, never hand-edited, so joint ranges, actuator limits and link
shapes are the very numbers ``arm_spec()`` declares. Every call returns a fresh
``MjModel``: the env changes damping, friction, gear and payload mass in place, and two
envs must never share those.

Two command interfaces share one body tree. ``"torque"``: a motor per joint, ctrl is the
normalized torque. ``"position"``: a joint impedance controller at the physics rate,
built from MuJoCo's own parts so the substep loop stays in C: an affine actuator per
joint (ctrl = commanded position in rad, force ``Kp·ctrl − Kp·q − Kd·q̇``), gravity
compensation of the *nominal* links (``gravcomp`` on every link body, not on the payload)
routed through the actuators (``actuatorgravcomp``), and the joint's
``actuatorfrcrange`` saturating the sum at the motor's torque limit.
``dynamics.apply_dynamics`` scales all three by the actuator gain.

Contacts: arm geoms (contype 2, conaffinity 1) collide only with the obstacle
(contype 1, conaffinity 2), so any contact in ``MjData`` is an obstacle contact.
"""

from __future__ import annotations

import mujoco

from tether.sim.geometry import ARM, ArmGeometry, Link
from tether.spec import CommandInterface

END_EFFECTOR_SITE = "end_effector"
OBSTACLE_GEOM = "obstacle"
PAYLOAD_BODY = "payload"
# The payload body exists even when empty; MuJoCo needs a positive mass to compile it.
EMPTY_PAYLOAD_KG = 1e-6
PAYLOAD_RADIUS_M = 0.03


def build_mjcf(arm: ArmGeometry = ARM, command_interface: CommandInterface = "torque") -> str:
    """The MJCF document for ``arm`` commanded through ``command_interface``."""
    position = command_interface == "position"
    bodies = _payload_body(arm)
    # Built inside out: each link's body wraps the one after it.
    for i in reversed(range(len(arm.links))):
        link = arm.links[i]
        pos = f"0 0 {arm.base_height_m}" if i == 0 else f"0 0 {arm.links[i - 1].length_m}"
        site = (
            f'<site name="{END_EFFECTOR_SITE}" pos="0 0 {arm.end_effector_offset_m}" size="0.01"/>'
            if i == len(arm.links) - 1
            else ""
        )
        ax = " ".join(str(a) for a in link.axis)
        impedance = ' gravcomp="1"' if position else ""
        saturation = (
            f' actuatorgravcomp="true" actuatorfrcrange="{-link.torque_limit_nm} {link.torque_limit_nm}"'
            if position
            else ""
        )
        bodies = f"""
<body name="{link.name}" pos="{pos}"{impedance}>
  <joint name="{link.joint}" type="hinge" axis="{ax}" armature="{link.armature_kg_m2}"
         damping="{link.damping_nm_s}" frictionloss="{link.friction_nm}"
         range="{link.position_low_rad} {link.position_high_rad}"{saturation}/>
  <geom name="{link.name}_geom" type="capsule" fromto="0 0 0 0 0 {link.length_m}"
        size="{link.radius_m}" mass="{link.mass_kg}" contype="2" conaffinity="1"/>
  {site}
  {bodies}
</body>"""
    motors = "\n".join(_actuator(link, position) for link in arm.links)
    cx, cy, cz = arm.obstacle_center_m
    return f"""<mujoco model="tether_arm">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{arm.timestep_s}" gravity="0 0 -9.81" integrator="implicitfast"/>
  <worldbody>
    <geom name="{OBSTACLE_GEOM}" type="sphere" pos="{cx} {cy} {cz}" size="{arm.obstacle_radius_m}"
          contype="1" conaffinity="2"/>
    {bodies}
  </worldbody>
  <actuator>
    {motors}
  </actuator>
</mujoco>
"""


def _actuator(link: Link, position: bool) -> str:
    if not position:
        return (
            f'<motor name="{link.joint}_motor" joint="{link.joint}" gear="{link.torque_limit_nm}"'
            ' ctrllimited="true" ctrlrange="-1 1"/>'
        )
    kp, kd = link.stiffness_nm_rad, link.impedance_damping_nm_s_rad
    return (
        f'<general name="{link.joint}_impedance" joint="{link.joint}" gaintype="fixed" '
        f'gainprm="{kp}" biastype="affine" biasprm="0 {-kp} {-kd}" ctrllimited="false"/>'
    )


def _payload_body(arm: ArmGeometry) -> str:
    return (
        f'<body name="{PAYLOAD_BODY}" pos="0 0 {arm.end_effector_offset_m}">'
        f'<inertial pos="0 0 0" mass="{EMPTY_PAYLOAD_KG}" diaginertia="1e-9 1e-9 1e-9"/>'
        "</body>"
    )


def build_model(
    arm: ArmGeometry = ARM, command_interface: CommandInterface = "torque"
) -> mujoco.MjModel:
    """A fresh compiled model of ``arm`` commanded through ``command_interface``."""
    return mujoco.MjModel.from_xml_string(build_mjcf(arm, command_interface))


def set_payload(model: mujoco.MjModel, mass_kg: float) -> None:
    """Put a point-like payload of ``mass_kg`` at the end effector (0 removes it)."""
    body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, PAYLOAD_BODY)
    mass = max(mass_kg, EMPTY_PAYLOAD_KG)
    model.body_mass[body] = mass
    # A solid sphere's inertia; the payload is small, so it barely matters, but a
    # zero inertia with a real mass would be unphysical.
    model.body_inertia[body] = 0.4 * mass * PAYLOAD_RADIUS_M**2
