"""Kinematics of a user's robot from its MuJoCo (MJCF) or URDF model file.

The supervisor's Cartesian checks (workspace, obstacles, the swept clearance of a
command) need to place the robot's body at a joint position; tether has that for its
built-in arm only. :class:`ModelKinematics` gives it for any robot MuJoCo can load
(``tether serve --kinematics robot.xml --end-effector tool``):

- the served joints are the spec's, found by name among the model's hinge and slide
  joints; every other joint of the model (a gripper's fingers) stays at the model's
  reference position ``qpos0``;
- the robot's body is every geom on a body that a served joint moves, except geoms that
  collide with nothing (``contype`` and ``conaffinity`` 0: visual meshes), covered by
  spheres no smaller than the geom: a sphere geom by itself; a capsule, cylinder, box or
  ellipsoid by a row of spheres along its longest axis, as the built-in arm's links are
  covered (``tether.sim.kinematics.sphere_row``);
  anything else (a mesh) by MuJoCo's bounding sphere (``geom_rbound``);
- the end effector is the named site, else the named body's origin;
- the gravity torque is MuJoCo's bias force at zero velocity (``mj_rne``) on the served
  joints, with the model's masses.

There is no closed form, so the supervisor evaluates every pose of a swept check with
MuJoCo (its Python path, tens of µs per pose; docs/safety.md). Calls are serialized on
one ``MjData`` by a lock, so one instance serves every thread. Invariant: a model is
refused at construction (``LimitsError`` naming what is missing) unless every served
joint is a 1-dof joint of the model and the robot has at least one colliding geom.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import mujoco
import numpy as np
from numpy.typing import NDArray

from tether.safety.errors import LimitsError
from tether.sim.kinematics import sphere_row
from tether.spec import RobotSpec

# MuJoCo's joint and geom types as the model's integer arrays hold them.
_ONE_DOF = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
_SLIDE = int(mujoco.mjtJoint.mjJNT_SLIDE)
_FREE = int(mujoco.mjtJoint.mjJNT_FREE)
_SPHERE = int(mujoco.mjtGeom.mjGEOM_SPHERE)
_ROUND = (int(mujoco.mjtGeom.mjGEOM_CAPSULE), int(mujoco.mjtGeom.mjGEOM_CYLINDER))
_ROWS = (*_ROUND, int(mujoco.mjtGeom.mjGEOM_BOX), int(mujoco.mjtGeom.mjGEOM_ELLIPSOID))


class ModelKinematics:
    """:class:`tether.safety.kinematics.Kinematics` of ``spec``'s robot from a model file."""

    def __init__(self, path: str | Path, spec: RobotSpec, end_effector: str) -> None:
        p = Path(path)
        try:
            model = mujoco.MjModel.from_xml_path(str(p))
        except (ValueError, OSError) as exc:
            raise LimitsError(f"cannot load the robot model {p}: {exc}") from exc
        self._model = model
        self._data = mujoco.MjData(model)
        self._lock = threading.Lock()
        self.n_joints = spec.n_joints
        self._qpos, self._dof, moved = _served_joints(model, spec, p)
        self._site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, end_effector)
        self._body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, end_effector)
        if self._site < 0 and self._body < 0:
            raise LimitsError(
                f"the robot model {p} has no site or body named {end_effector!r} for the "
                "end effector; name one with --end-effector"
            )
        self._geoms, self._offsets, self._radii = _covering(model, moved)
        self._reach = _reach(model, spec, self._geoms, self._offsets, self._site, self._body)
        if not len(self._geoms):
            raise LimitsError(
                f"the robot model {p} has no colliding geom on a body its joints "
                f"{list(spec.joint_names)} move: nothing to keep clear of obstacles"
            )
        self._bias = np.zeros(model.nv)

    @property
    def n_spheres(self) -> int:
        return len(self._radii)

    def joint_reach(self) -> tuple[float, ...] | None:
        """Per served joint, a bound on how fast any sphere centre or the end effector
        moves with it (m per rad, or per m for a slide joint), whatever the pose: what
        lets the supervisor skip poses a clearance already proves clear, and space a
        swept check's samples by distance (:mod:`tether.safety.reach`). None when a
        joint on the way slides without limits or floats free (nothing bounds where it
        carries a point)."""
        return self._reach

    def end_effector(self, q: NDArray[np.floating]) -> NDArray[np.float64]:
        """End-effector position (m, base frame), shape ``(3,)``."""
        with self._lock:
            self._pose(q)
            d = self._data
            return np.array(d.site_xpos[self._site] if self._site >= 0 else d.xpos[self._body])

    def collision_spheres(
        self, q: NDArray[np.floating]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Spheres covering the robot's colliding geoms: centres ``(K, 3)``, radii ``(K,)`` (m)."""
        with self._lock:
            self._pose(q)
            rotations = self._data.geom_xmat[self._geoms].reshape(-1, 3, 3)
            centers = self._data.geom_xpos[self._geoms] + np.einsum(
                "kij,kj->ki", rotations, self._offsets
            )
        return centers, self._radii.copy()

    def gravity_torque(self, q: NDArray[np.floating]) -> NDArray[np.float64]:
        """Joint torques (N·m) that hold the robot still at ``q`` against gravity, ``(n,)``."""
        with self._lock:
            self._pose(q)
            mujoco.mj_comPos(self._model, self._data)
            # With zero velocity the bias force C(q, q̇)q̇ + g(q) is exactly the gravity term.
            mujoco.mj_rne(self._model, self._data, 0, self._bias)
            return self._bias[self._dof].copy()

    def _pose(self, q: NDArray[np.floating]) -> None:
        if np.shape(q) != (self.n_joints,):
            raise LimitsError(
                f"q must have shape ({self.n_joints},) (one position per served joint), "
                f"got {np.shape(q)}"
            )
        d = self._data
        d.qpos[:] = self._model.qpos0
        d.qpos[self._qpos] = q
        d.qvel[:] = 0.0
        mujoco.mj_kinematics(self._model, d)


def _served_joints(
    model: mujoco.MjModel, spec: RobotSpec, path: Path
) -> tuple[NDArray[np.intp], NDArray[np.intp], set[int]]:
    """The served joints' qpos and dof addresses, and the bodies they move."""
    qpos: list[int] = []
    dofs: list[int] = []
    carriers: set[int] = set()
    for name in spec.joint_names:
        joint = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        if joint < 0:
            raise LimitsError(
                f"the robot model {path} has no joint named {name!r} (the spec's joints: "
                f"{list(spec.joint_names)})"
            )
        if int(model.jnt_type[joint]) not in _ONE_DOF:
            raise LimitsError(
                f"joint {name!r} of the robot model {path} is not a hinge or slide joint; "
                "the supervisor serves one position per joint"
            )
        qpos.append(int(model.jnt_qposadr[joint]))
        dofs.append(int(model.jnt_dofadr[joint]))
        carriers.add(int(model.jnt_bodyid[joint]))
    moved = set()
    for body in range(1, model.nbody):
        b = body
        while b > 0 and b not in carriers:
            b = int(model.body_parentid[b])
        if b > 0:
            moved.add(body)
    return np.array(qpos, dtype=np.intp), np.array(dofs, dtype=np.intp), moved


def _covering(
    model: mujoco.MjModel, moved: set[int]
) -> tuple[NDArray[np.intp], NDArray[np.float64], NDArray[np.float64]]:
    """Per covering sphere: its geom, its centre in the geom's frame, its radius."""
    geoms: list[int] = []
    offsets: list[tuple[float, float, float]] = []
    radii: list[float] = []
    for g in range(model.ngeom):
        if int(model.geom_bodyid[g]) not in moved:
            continue
        if model.geom_contype[g] == 0 and model.geom_conaffinity[g] == 0:
            continue
        kind = int(model.geom_type[g])
        size = [float(s) for s in model.geom_size[g]]
        if kind == _SPHERE:
            row: list[tuple[float, float, float]] = [(0.0, 0.0, 0.0)]
            radius = size[0]
        elif kind in _ROWS and (shape := _row_shape(kind, size))[2] > 0.0:
            axis, half_length, cross = shape
            along, radius = sphere_row(2.0 * half_length, cross)
            row = [_on_axis(axis, t - half_length) for t in along.tolist()]
        else:  # a mesh, or a degenerate cross-section: MuJoCo's bounding sphere
            row = [(0.0, 0.0, 0.0)]
            radius = float(model.geom_rbound[g])
        geoms.extend([g] * len(row))
        offsets.extend(row)
        radii.extend([radius] * len(row))
    return (
        np.array(geoms, dtype=np.intp),
        np.array(offsets, dtype=np.float64).reshape(-1, 3),
        np.array(radii, dtype=np.float64),
    )


def _on_axis(axis: int, t: float) -> tuple[float, float, float]:
    centre = [0.0, 0.0, 0.0]
    centre[axis] = t
    return centre[0], centre[1], centre[2]


def _row_shape(kind: int, size: list[float]) -> tuple[int, float, float]:
    """(local axis, half length along it, radius of the cross-section about it) of a
    geom covered by a row of spheres."""
    if kind in _ROUND:
        return 2, size[1], size[0]  # radius, half-height along z (a capsule's caps: R > r)
    axis = int(np.argmax(size))
    others = [s for i, s in enumerate(size) if i != axis]
    return axis, size[axis], math.hypot(*others)  # a box's or ellipsoid's half-extents


def _reach(
    model: mujoco.MjModel,
    spec: RobotSpec,
    geoms: NDArray[np.intp],
    offsets: NDArray[np.float64],
    site: int,
    body: int,
) -> tuple[float, ...] | None:
    """:meth:`ModelKinematics.joint_reach` from the model's fixed lengths.

    A point carried by hinge ``j`` moves at most its distance from ``j``'s anchor per
    radian; that distance is at most the anchor's offset in its body, plus each body's
    offset from its parent on the way to the point's body, plus how far that body's own
    joints can move its origin (twice a hinge anchor's offset, a slide's longest travel),
    plus the point's offset in its body (the triangle inequality, whatever the pose).
    """
    # How far one body's origin can be from its parent's, whatever its joints do (inf:
    # nothing bounds it, a free joint or a slide without limits).
    step = []
    for b in range(model.nbody):
        length = float(np.linalg.norm(model.body_pos[b]))
        first = int(model.body_jntadr[b])
        for k in range(first, first + int(model.body_jntnum[b])):
            kind = int(model.jnt_type[k])
            if kind == _SLIDE and model.jnt_limited[k]:
                reference = float(model.qpos0[model.jnt_qposadr[k]])
                length += float(np.abs(model.jnt_range[k] - reference).max())
            elif kind in (_SLIDE, _FREE):
                length = math.inf
            else:  # a hinge or ball turns the origin about the anchor
                length += 2.0 * float(np.linalg.norm(model.jnt_pos[k]))
        step.append(length)
    points = [
        (int(model.geom_bodyid[g]), float(np.linalg.norm(model.geom_pos[g]) + np.linalg.norm(o)))
        for g, o in zip(geoms.tolist(), offsets, strict=True)
    ]
    if site >= 0:
        points.append((int(model.site_bodyid[site]), float(np.linalg.norm(model.site_pos[site]))))
    else:
        points.append((body, 0.0))
    out = []
    for name in spec.joint_names:
        joint = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        if int(model.jnt_type[joint]) == _SLIDE:
            out.append(1.0)  # a slide moves everything it carries by its own travel
            continue
        carrier = int(model.jnt_bodyid[joint])
        # The carrier's other joints can move its origin too; its offset from its
        # parent does not count (the anchor is measured from the carrier's origin).
        own = step[carrier] - float(np.linalg.norm(model.body_pos[carrier]))
        anchor = float(np.linalg.norm(model.jnt_pos[joint])) + own
        farthest = 0.0
        for b, extra in points:
            distance, c = extra, b
            while c > 0 and c != carrier:
                distance += step[c]
                c = int(model.body_parentid[c])
            if c == carrier:
                farthest = max(farthest, anchor + distance)
        out.append(farthest)
    return tuple(out) if all(math.isfinite(r) for r in out) else None
