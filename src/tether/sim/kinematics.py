"""Forward kinematics, collision spheres and gravity torques of the built-in arm.

``ArmKinematics`` owns a private ``MjModel``/``MjData`` compiled from the same MJCF as
the env and never steps the simulation: each call writes ``q`` into its own data and
runs only the kinematic (or, for gravity, the recursive Newton-Euler) pass. The safety
supervisor uses it to keep the arm away from the obstacle and inside the workspace.

Invariant: every point of every arm geom lies inside at least one collision sphere, so
keeping the spheres clear keeps the real arm clear.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np
from numpy.typing import NDArray

from tether.sim.errors import SimConfigError
from tether.sim.geometry import ARM, ArmGeometry
from tether.sim.mjcf import END_EFFECTOR_SITE, build_model, set_payload
from tether.spec import RobotSpec

FloatArray = NDArray[np.float64]

# Spheres are this much larger than the capsule they cover. Larger spheres need fewer
# of them (spacing grows as sqrt(inflation**2 - 1)) but waste clearance; 1.25 gives
# 1.5 capsule radii between centres and 25 % extra clearance.
SPHERE_INFLATION = 1.25


class ArmKinematics:
    """Kinematic queries on the built-in arm at a given joint position ``q`` (rad).

    Each call reuses one private ``MjData``, so an instance is not thread-safe: give
    each thread its own (construction takes a few milliseconds).
    """

    def __init__(
        self,
        spec: RobotSpec | None = None,
        *,
        payload_mass_kg: float = 0.0,
        arm: ArmGeometry = ARM,
    ) -> None:
        names = tuple(link.joint for link in arm.links)
        if spec is not None and spec.joint_names != names:
            raise SimConfigError(
                f"ArmKinematics models the built-in arm with joints {names}, but the spec "
                f"{spec.name!r} has joints {spec.joint_names}; pass tether.sim.arm_spec() or none"
            )
        if not (math.isfinite(payload_mass_kg) and payload_mass_kg >= 0):
            raise SimConfigError(
                f"payload_mass_kg must be a finite mass >= 0 kg, got {payload_mass_kg}"
            )
        self._model = build_model(arm)
        self._data = mujoco.MjData(self._model)
        self.n_joints = len(names)
        self._site = mujoco.mj_name2id(self._model, mujoco.mjtObj.mjOBJ_SITE, END_EFFECTOR_SITE)
        set_payload(self._model, payload_mass_kg)
        bodies, offsets, radii = _sphere_layout(self._model, arm)
        self._sphere_body = bodies
        self._sphere_offset = offsets
        self._sphere_radius = radii
        self._bias = np.zeros(self._model.nv)

    @property
    def n_spheres(self) -> int:
        return len(self._sphere_radius)

    def end_effector(self, q: NDArray[np.floating]) -> FloatArray:
        """End-effector position (m, base frame), shape ``(3,)``."""
        self._set_q(q)
        mujoco.mj_kinematics(self._model, self._data)
        return np.array(self._data.site_xpos[self._site])

    def collision_spheres(self, q: NDArray[np.floating]) -> tuple[FloatArray, FloatArray]:
        """Spheres covering every arm link: centres ``(K, 3)`` (m) and radii ``(K,)`` (m)."""
        self._set_q(q)
        mujoco.mj_kinematics(self._model, self._data)
        # Every sphere sits on its link's local z axis, so only the rotation's third
        # column is needed.
        axes = self._data.xmat[self._sphere_body][:, 2::3]
        centers = self._data.xpos[self._sphere_body] + axes * self._sphere_offset[:, None]
        return centers, self._sphere_radius.copy()

    def gravity_torque(self, q: NDArray[np.floating]) -> FloatArray:
        """Joint torques (N·m) that hold the arm still at ``q`` against gravity, shape ``(n,)``."""
        self._set_q(q)
        self._data.qvel[:] = 0.0
        mujoco.mj_kinematics(self._model, self._data)
        mujoco.mj_comPos(self._model, self._data)
        # With zero velocity the bias force C(q, q̇)q̇ + g(q) is exactly the gravity term.
        mujoco.mj_rne(self._model, self._data, 0, self._bias)
        return self._bias.copy()

    def _set_q(self, q: NDArray[np.floating]) -> None:
        if np.shape(q) != (self.n_joints,):
            raise SimConfigError(
                f"q must have shape ({self.n_joints},) (one angle per joint, rad), got {np.shape(q)}"
            )
        self._data.qpos[:] = q


def _sphere_layout(
    model: mujoco.MjModel, arm: ArmGeometry
) -> tuple[NDArray[np.intp], FloatArray, FloatArray]:
    bodies: list[int] = []
    offsets: list[float] = []
    radii: list[float] = []
    for link in arm.links:
        body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, link.name)
        radius = SPHERE_INFLATION * link.radius_m
        # Adjacent spheres of radius R around a capsule of radius r overlap enough to
        # cover its surface when their centres are at most 2*sqrt(R**2 - r**2) apart.
        max_gap = 2.0 * math.sqrt(radius**2 - link.radius_m**2)
        count = math.ceil(link.length_m / max_gap) + 1
        for z in np.linspace(0.0, link.length_m, count):
            bodies.append(body)
            offsets.append(float(z))
            radii.append(radius)
    return np.array(bodies, dtype=np.intp), np.array(offsets), np.array(radii)
