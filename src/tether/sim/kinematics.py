"""Forward kinematics, collision spheres and gravity torques of the built-in arm.

``ArmKinematics`` owns a private ``MjModel``/``MjData`` compiled from the same MJCF as
the env and never steps the simulation: each call writes ``q`` into its own data and
runs only the kinematic (or, for gravity, the recursive Newton-Euler) pass. The safety
supervisor uses it to keep the arm away from the obstacle and inside the workspace.

``planar_chain()`` describes the same spheres in closed form (a yawing column carrying a
chain that pitches in one vertical plane), for callers that evaluate many poses and
cannot afford a MuJoCo pass and numpy glue per pose (the safety supervisor's swept
checks).

Invariant: every point of every arm geom lies inside at least one collision sphere, so
keeping the spheres clear keeps the real arm clear; the closed form agrees with the
MuJoCo pass to rounding (``tests/sim/test_kinematics.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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


@dataclass(frozen=True)
class PlanarChain:
    """The arm's points in closed form. Link 0 yaws by ``q[0]`` about z; links 1.. pitch,
    link ``l`` at ``θ_l = q[1] + … + q[l]`` from vertical (the column: ``θ_0 = 0``), all in
    the vertical plane at the yaw. Link ``l`` starts at ``(R_l, Z_l)`` (radial, height):
    ``(0, base_height_m)`` for the column, then each link's tip,
    ``(R_l + L_l·sin θ_l, Z_l + L_l·cos θ_l)``; a point ``offset`` along link ``l`` sits at
    ``(R_l + offset·sin θ_l, Z_l + offset·cos θ_l)``, i.e. at
    ``(R·cos q[0], R·sin q[0], Z)`` in the base frame."""

    base_height_m: float
    link_lengths_m: tuple[float, ...]
    sphere_links: tuple[int, ...]  # the link each collision sphere rides on
    sphere_offsets_m: tuple[float, ...]  # its centre's distance along that link
    sphere_radii_m: tuple[float, ...]
    end_effector_offset_m: float  # along the last link


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
        link_of_body = {
            mujoco.mj_name2id(self._model, mujoco.mjtObj.mjOBJ_BODY, link.name): i
            for i, link in enumerate(arm.links)
        }
        axes = [link.axis for link in arm.links]
        # Only the built-in layout (a yawing column, then pitching links) has the closed form.
        self._chain = (
            PlanarChain(
                base_height_m=arm.base_height_m,
                link_lengths_m=tuple(link.length_m for link in arm.links),
                sphere_links=tuple(link_of_body[b] for b in bodies.tolist()),
                sphere_offsets_m=tuple(offsets.tolist()),
                sphere_radii_m=tuple(radii.tolist()),
                end_effector_offset_m=arm.end_effector_offset_m,
            )
            if axes[0] == (0.0, 0.0, 1.0) and all(a == (0.0, 1.0, 0.0) for a in axes[1:])
            else None
        )

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

    def planar_chain(self) -> PlanarChain | None:
        """The collision spheres and end effector in closed form (None: not this layout)."""
        return self._chain

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
        along, radius = sphere_row(link.length_m, link.radius_m)
        for z in along.tolist():
            bodies.append(body)
            offsets.append(z)
            radii.append(radius)
    return np.array(bodies, dtype=np.intp), np.array(offsets), np.array(radii)


def sphere_row(length_m: float, radius_m: float) -> tuple[FloatArray, float]:
    """Spheres covering a capsule (or cylinder) of ``radius_m`` around a segment of
    ``length_m``: their centres' positions along it (from 0 to ``length_m``) and their
    radius, ``SPHERE_INFLATION`` times the capsule's. Adjacent spheres of radius R around
    a capsule of radius r overlap enough to cover its surface when their centres are at
    most 2*sqrt(R**2 - r**2) apart; the end spheres (R > r) cover the ends."""
    radius = SPHERE_INFLATION * radius_m
    max_gap = 2.0 * math.sqrt(radius**2 - radius_m**2)
    count = math.ceil(length_m / max_gap) + 1
    return np.linspace(0.0, length_m, count), radius
