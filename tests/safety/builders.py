"""Shared builders for the safety tests: a 7-joint synthetic robot and a planar arm.

``PlanarArm`` is a tiny analytic kinematics (two links in the x-z plane) so the
Cartesian checks can be tested without MuJoCo; the physics test uses the real
``tether.sim.ArmKinematics``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from tether.safety import LimitsConfig, SafetyLimits
from tether.spec import Box, ObservationLayout, RobotSpec, Sphere

N_JOINTS = 7
# Upper bound of the acceleration a full action causes in the synthetic robot (rad/s²):
# three times the braking deceleration, so the worst-case gains differ on each side.
GAIN_HI = 60.0


def seven_joint_spec() -> RobotSpec:
    n = N_JOINTS
    names = (
        tuple(f"q{i}" for i in range(n))
        + tuple(f"qd{i}" for i in range(n))
        + ("ee_x", "ee_y", "ee_z", "t_x", "t_y", "t_z")
    )
    return RobotSpec(
        name="synthetic-7",
        joint_names=tuple(f"j{i}" for i in range(n)),
        control_period_s=0.01,
        observation_names=names,
        layout=ObservationLayout((0, n), (n, 2 * n), (2 * n, 2 * n + 3), (2 * n + 3, 2 * n + 6)),
        joint_position_low_rad=(-2.8, -1.7, -2.8, -3.0, -2.8, -0.1, -2.8),
        joint_position_high_rad=(2.8, 1.7, 2.8, -0.1, 2.8, 3.7, 2.8),
        joint_velocity_limit_rad_s=(2.1, 2.1, 2.1, 2.1, 2.6, 2.6, 2.6),
        joint_acceleration_limit_rad_s2=(20.0,) * n,
        torque_limit_nm=(87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0),
        home_position_rad=(0.0, -0.5, 0.0, -2.0, 0.0, 1.5, 0.8),
        workspace=Box((-1.0, -1.0, 0.0), (1.0, 1.0, 1.2)),
        obstacles=(Sphere((0.5, 0.0, 0.3), 0.1),),
    )


def seven_joint_limits(config: LimitsConfig | None = None) -> SafetyLimits:
    return SafetyLimits.from_spec(
        seven_joint_spec(),
        config or LimitsConfig(max_action_change_per_step=0.5),
        acceleration_per_action_rad_s2=(GAIN_HI,) * N_JOINTS,
    )


def observation(limits: SafetyLimits, q: np.ndarray, v: np.ndarray, size: int = 20) -> np.ndarray:
    obs = np.zeros(size, dtype=np.float32)
    obs[slice(*limits.layout.joint_position)] = q
    obs[slice(*limits.layout.joint_velocity)] = v
    return obs


class PlanarArm:
    """Two links in the x-z plane from a base at height ``base_z``.

    Joint 0 pitches the first link from vertical, joint 1 the second relative to it.
    ``gravity_nm`` scales a simple gravity torque (zero when upright).
    """

    def __init__(
        self,
        lengths: tuple[float, float] = (0.4, 0.3),
        base_z: float = 0.1,
        gravity_nm: float = 0.0,
    ) -> None:
        self.l1, self.l2 = lengths
        self.base_z = base_z
        self.radius = 0.04
        self.gravity_nm = gravity_nm

    def _joints(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        base = np.array([0.0, 0.0, self.base_z])
        elbow = base + self.l1 * np.array([np.sin(q[0]), 0.0, np.cos(q[0])])
        tip = elbow + self.l2 * np.array([np.sin(q[0] + q[1]), 0.0, np.cos(q[0] + q[1])])
        return base, elbow, tip

    def end_effector(self, q: np.ndarray) -> np.ndarray:
        return self._joints(q)[2]

    def collision_spheres(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        base, elbow, tip = self._joints(q)
        t = np.linspace(0.0, 1.0, 6)[:, None]
        centers = np.vstack([base + t * (elbow - base), elbow + t[1:] * (tip - elbow)])
        return centers, np.full(len(centers), self.radius)

    def gravity_torque(self, q: np.ndarray) -> np.ndarray:
        # Both links lean: the torque that holds them grows with the sine of the lean.
        outer = np.sin(q[0] + q[1])
        return -self.gravity_nm * np.array([np.sin(q[0]) + outer, outer])


def planar_limits(**config: float) -> SafetyLimits:
    return SafetyLimits.from_spec(
        planar_spec(), LimitsConfig(**config), acceleration_per_action_rad_s2=(GAIN_HI, GAIN_HI)
    )


def planar_spec() -> RobotSpec:
    names = ("q0", "q1", "qd0", "qd1", "ee_x", "ee_y", "ee_z", "t_x", "t_y", "t_z")
    return RobotSpec(
        name="planar-2",
        joint_names=("shoulder", "elbow"),
        control_period_s=0.01,
        observation_names=names,
        layout=ObservationLayout((0, 2), (2, 4), (4, 7), (7, 10)),
        joint_position_low_rad=(-2.5, -2.5),
        joint_position_high_rad=(2.5, 2.5),
        joint_velocity_limit_rad_s=(2.0, 2.0),
        joint_acceleration_limit_rad_s2=(20.0, 20.0),
        torque_limit_nm=(10.0, 10.0),
        home_position_rad=(0.0, 0.0),
        workspace=Box((-0.6, -0.3, 0.0), (0.6, 0.3, 0.9)),
        obstacles=(Sphere((0.45, 0.0, 0.45), 0.08),),
    )


def step_model(
    limits: SafetyLimits,
    q: np.ndarray,
    v: np.ndarray,
    u: np.ndarray,
    gain: np.ndarray,
    u_gravity: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One control period of the supervisor's model q̈ = gain·(u − u_gravity), semi-implicit.

    ``gain`` is the robot's true acceleration per unit action, anywhere between the
    braking deceleration and the acceleration-per-action bound the limits declare;
    ``u_gravity`` is the action that holds the robot still (zero without gravity).
    """
    dt = limits.control_period_s
    push = u.astype(np.float64) - (0.0 if u_gravity is None else u_gravity)
    v_next = v + gain * push * dt
    return q + v_next * dt, v_next


# The built-in arm's joints under other names.
RENAMED_JOINTS = {
    "base_yaw": "j0",
    "shoulder_pitch": "j1",
    "elbow_pitch": "j2",
    "wrist_pitch": "j3",
}


def someone_elses_arm(folder: Path) -> tuple[RobotSpec, Path]:
    """The built-in position arm's geometry under other joint names, and its MuJoCo model
    written to ``folder``: a robot tether has no kinematics of its own for."""
    from tether.sim import arm_spec
    from tether.sim.mjcf import build_mjcf

    xml = build_mjcf(command_interface="position")
    for old, new in RENAMED_JOINTS.items():
        xml = xml.replace(f'"{old}"', f'"{new}"')
    path = folder / "my_arm.xml"
    path.write_text(xml)
    spec = dataclasses.replace(
        arm_spec("position"), name="my-arm", joint_names=tuple(RENAMED_JOINTS.values())
    )
    return spec, path
