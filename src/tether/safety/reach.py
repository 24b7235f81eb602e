"""How far a joint's rotation can move the arm: a bound that lets the supervisor skip
forward kinematics when a pose is provably clear of every obstacle and wall.

For a chain of revolute joints, a point ``p`` carried by joint ``j`` moves at
``|∂p/∂q_j| ≤ dist(p, axis_j) ≤ |p − o_j|`` per radian, where ``o_j`` is any point of the
axis. By the triangle inequality along the chain, ``|p − o_j|`` never exceeds the sum of
the link lengths from joint ``j`` to ``p``, whatever the pose; for the base's yaw, whose
axis runs up the base column, the distance from the axis never exceeds the links after
the column. Integrating along the
straight joint-space path from ``q_a`` to ``q`` moves every point by at most
``Σ_j reach_j · |q_j − q_a,j|``, and obstacle and workspace clearances are 1-Lipschitz in
the points, so ``clearance(q) ≥ clearance(q_a) − Σ_j reach_j · |q_j − q_a,j|``.

Invariant: a reach is returned only for kinematics whose geometry it was derived from:
the built-in arm's (checked against its own model at construction), or a robot's model
file's (``ModelKinematics.joint_reach``, the same bound from the model's fixed lengths);
for any other kinematics it is ``None`` and the supervisor evaluates every pose exactly.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import numpy as np

from tether.safety.kinematics import Kinematics

if TYPE_CHECKING:
    from tether.safety.model_kinematics import ModelKinematics
    from tether.sim import ArmKinematics

# Kept on top of the bound for the rounding of forward kinematics and clearances
# (about 1e-15 m): a skipped pose is clear by more than this.
SLACK_M = 1e-9

# The reach of each ArmKinematics seen (None: not the built-in arm's geometry), the
# built-in arm's own model to compare with, and a lock since both are shared.
_VERIFIED: weakref.WeakKeyDictionary[object, tuple[float, ...] | None] = weakref.WeakKeyDictionary()
_REFERENCE: list[ArmKinematics] = []
_LOCK = threading.Lock()

# Poses at which a kinematics must agree with the built-in arm's to be recognised as it.
_PROBES = (
    (0.0, 0.0, 0.0, 0.0),
    (0.7, -0.4, 1.1, 0.3),
    (-1.9, 1.5, -0.2, -1.2),
)


def joint_reach(kinematics: Kinematics) -> tuple[float, ...] | None:
    """Per-joint bound (m/rad) on how fast any collision sphere centre or the end
    effector moves with each joint, or None when the geometry is not known."""
    # A robot's model gives its own bound (tether.safety.model_kinematics).
    if type(kinematics).__module__ == "tether.safety.model_kinematics":
        return cast("ModelKinematics", kinematics).joint_reach()
    # Only tether.sim's arm has a known geometry; importing tether.sim for anything else
    # (a client's own robot) would load MuJoCo for nothing.
    if type(kinematics).__module__ != "tether.sim.kinematics":
        return None
    from tether.sim import ArmKinematics

    if not isinstance(kinematics, ArmKinematics):
        return None
    # Verified once per kinematics object: a supervisor is rebuilt for every session and
    # degradation level, and building the reference model takes over a millisecond.
    with _LOCK:
        if kinematics not in _VERIFIED:
            _VERIFIED[kinematics] = _arm_reach(kinematics)
        return _VERIFIED[kinematics]


def _arm_reach(kinematics: ArmKinematics) -> tuple[float, ...] | None:
    from tether.sim import ArmKinematics
    from tether.sim.geometry import ARM

    if not _REFERENCE:
        _REFERENCE.append(ArmKinematics())
    reference = _REFERENCE[0]
    if (kinematics.n_joints, kinematics.n_spheres) != (reference.n_joints, reference.n_spheres):
        return None
    for probe in _PROBES:
        q = np.asarray(probe, dtype=np.float64)
        mine, yours = kinematics.collision_spheres(q), reference.collision_spheres(q)
        if not (
            np.array_equal(mine[0], yours[0])
            and np.array_equal(mine[1], yours[1])
            and np.array_equal(kinematics.end_effector(q), reference.end_effector(q))
        ):
            return None
    lengths = [link.length_m for link in ARM.links]
    # The farthest point the last joint carries: its link's tip or the end effector.
    tip = max(lengths[-1], ARM.end_effector_offset_m)
    # The base yaws about its own column, so a point's distance from that axis is its
    # radial distance, which the column adds nothing to (0.66 m instead of 0.91).
    return tuple(sum(lengths[max(j, 1) : -1]) + tip for j in range(len(lengths)))


class ClearanceAnchor:
    """The last pose whose clearance for one check was computed exactly.

    ``proves_clear(q)`` is true only when the bound above guarantees a clearance above
    zero at ``q``; a non-finite clearance (a broken model) is never kept as an anchor.
    """

    __slots__ = ("_clearance", "_q", "_reach")

    def __init__(self, reach: Sequence[float]) -> None:
        self._reach = tuple(reach)
        self._q: Sequence[float] | None = None
        self._clearance = 0.0

    def proves_clear(self, q: Sequence[float]) -> bool:
        anchor = self._q
        if anchor is None:
            return False
        moved = 0.0
        for r, x, a in zip(self._reach, q, anchor, strict=True):
            moved += r * abs(x - a)
        return moved + SLACK_M < self._clearance

    def proves_all(self, poses: Sequence[Sequence[float]]) -> bool:
        """``proves_clear`` for every pose."""
        return all(self.proves_clear(q) for q in poses)

    def update(self, q: Sequence[float], clearance: float) -> None:
        finite = math.isfinite(clearance)
        self._q = q if finite else None
        self._clearance = clearance if finite else 0.0
