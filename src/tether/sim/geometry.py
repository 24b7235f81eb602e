"""The numbers that define the built-in arm: links, masses, limits, obstacle, workspace.

Everything else is derived from :data:`ARM`: the MJCF model (``mjcf.py``), the
``RobotSpec`` (``spec.py``) and the collision spheres (``kinematics.py``). Keeping one
source is what stops the simulated limits and the declared limits from drifting apart.

Frame: the base sits at the origin, z up. Pitch angles are measured from vertical; a
positive pitch tips the link towards +x (at zero yaw).
"""

from __future__ import annotations

from dataclasses import dataclass

# Position error at which the impedance controller asks for the full motor torque (rad).
IMPEDANCE_SATURATION_RAD = 0.5
# How far beyond each joint's range the position interface can command (rad): the
# controller accepts it, the joint limit stops it (so commands must be checked).
POSITION_COMMAND_OVERREACH_RAD = 0.15
# The impedance damping Kd as a fraction of the joint's own viscous damping (1).
IMPEDANCE_DAMPING_FRACTION = 0.5


@dataclass(frozen=True)
class Link:
    """One capsule link: it starts at its joint and runs ``length_m`` along the body's +z."""

    name: str
    joint: str
    axis: tuple[float, float, float]
    length_m: float
    radius_m: float
    mass_kg: float
    position_low_rad: float
    position_high_rad: float
    velocity_limit_rad_s: float
    torque_limit_nm: float
    home_rad: float
    # Reflected rotor inertia of the gearmotor (kg·m²). Real gearmotors have it, it keeps
    # the light wrist stable at the physics timestep, and on the yaw joint it bounds how
    # hard the swinging arm can spin the base through the Coriolis coupling.
    armature_kg_m2: float

    @property
    def damping_nm_s(self) -> float:
        """Nominal viscous damping (N·m·s/rad), as a geared motor's drag would give.

        Chosen so that full torque alone can drive the joint to twice its velocity limit:
        the limit still matters (a careless policy exceeds it), but a random one does not
        whirl the light wrist at tens of rad/s.
        """
        return self.torque_limit_nm / (2.0 * self.velocity_limit_rad_s)

    @property
    def friction_nm(self) -> float:
        """Nominal Coulomb friction loss (N·m): 1 % of the joint's torque limit."""
        return 0.01 * self.torque_limit_nm

    @property
    def stiffness_nm_rad(self) -> float:
        """Joint impedance stiffness Kp of the position interface (N·m/rad).

        The motor saturates at a position error of ``IMPEDANCE_SATURATION_RAD``: stiff
        enough that the nominal arm settles within millimetres of a target, soft enough
        that the rated worst case (gain 0.6, 0.5 kg payload) leaves centimetres of
        tracking error for a learner to win back (docs/sim.md).
        """
        return self.torque_limit_nm / IMPEDANCE_SATURATION_RAD

    @property
    def impedance_damping_nm_s_rad(self) -> float:
        """Joint impedance damping Kd of the position interface (N·m·s/rad).

        On top of the joint's own viscous damping; together about critical for the link's
        inertia at home (``IMPEDANCE_DAMPING_FRACTION`` of the joint's own damping).
        """
        return IMPEDANCE_DAMPING_FRACTION * self.damping_nm_s


@dataclass(frozen=True)
class ArmGeometry:
    """The arm as numbers. ``links[0]`` is the yawing base column; the rest pitch."""

    links: tuple[Link, ...]
    base_height_m: float
    # The end-effector site sits this far beyond the last link's joint, along the link.
    end_effector_offset_m: float
    obstacle_center_m: tuple[float, float, float]
    obstacle_radius_m: float
    workspace_low_m: tuple[float, float, float]
    workspace_high_m: tuple[float, float, float]
    timestep_s: float
    control_period_s: float
    # The envelope the arm is rated for. The declared deceleration limits hold anywhere
    # inside it, and the demo drift preset stays inside it, so the supervisor's braking
    # assumptions stay true on the drifted "real" arm too.
    rated_min_actuator_gain: float
    rated_max_payload_kg: float

    @property
    def substeps(self) -> int:
        return round(self.control_period_s / self.timestep_s)


ARM = ArmGeometry(
    links=(
        Link("base", "base_yaw", (0.0, 0.0, 1.0), 0.25, 0.05, 2.0, -2.6, 2.6, 2.0, 12.0, 0.0, 0.15),
        Link(
            "upper_arm",
            "shoulder_pitch",
            (0.0, 1.0, 0.0),
            0.30,
            0.035,
            1.2,
            -0.6,
            1.9,
            2.5,
            40.0,
            0.3,
            0.08,
        ),
        Link(
            "forearm",
            "elbow_pitch",
            (0.0, 1.0, 0.0),
            0.25,
            0.03,
            0.8,
            -0.3,
            2.4,
            3.0,
            20.0,
            1.3,
            0.03,
        ),
        Link(
            "hand", "wrist_pitch", (0.0, 1.0, 0.0), 0.09, 0.025, 0.3, -1.6, 1.6, 4.0, 6.0, 0.6, 0.01
        ),
    ),
    base_height_m=0.05,
    end_effector_offset_m=0.11,
    obstacle_center_m=(0.40, 0.0, 0.22),
    obstacle_radius_m=0.07,
    workspace_low_m=(-0.75, -0.75, -0.05),
    workspace_high_m=(0.75, 0.75, 1.05),
    timestep_s=0.002,
    control_period_s=0.02,
    rated_min_actuator_gain=0.6,
    rated_max_payload_kg=0.5,
)
