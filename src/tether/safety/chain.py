"""Workspace and obstacle clearance of a pose straight from its joint angles.

For kinematics that describe themselves in closed form
(:class:`tether.safety.kinematics.ChainKinematics`: the built-in arm), a pose's
clearances are a few dozen float operations on Python floats, several times cheaper
than a kinematics call plus the numpy of :class:`tether.safety.geometry.Clearance`,
which is what the swept Cartesian check spends most of its time on. Same meaning as
``Clearance``: the smallest surface distance of any collision sphere to any obstacle, and
the end effector's distance inside the workspace box, each minus its margin.

Invariant: :func:`chain_clearance` returns a ``ChainClearance`` only after it agreed
with ``Clearance`` over the kinematics' own ``end_effector``/``collision_spheres`` to
1e-9 m at probe poses; otherwise (another layout, box obstacles, a broken model) None,
and the supervisor evaluates through the kinematics calls.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate
from typing import cast

import numpy as np

from tether.safety.geometry import Clearance
from tether.safety.kinematics import ChainKinematics, Kinematics, PlanarChainLike
from tether.safety.limits import SafetyLimits
from tether.spec import Sphere

# Poses where the closed form must agree with the kinematics calls to be used.
_PROBES = (
    (0.0, 0.0, 0.0, 0.0),
    (0.7, -0.4, 1.1, 0.3),
    (-1.9, 1.5, -0.2, -1.2),
    (2.5, 1.8, 2.3, 1.5),
)
_AGREEMENT_M = 1e-9


class ChainClearance:
    """Clearances of a pose of a :class:`PlanarChainLike` arm, in plain floats."""

    def __init__(self, limits: SafetyLimits, chain: PlanarChainLike) -> None:
        lengths = chain.link_lengths_m
        self._n = len(lengths)
        self._base = chain.base_height_m
        # Each link's length, paired with the link after it: the tip of link l is the
        # start of link l + 1.
        self._lengths = lengths[:-1]
        # Spheres grouped by link and radius: within a group only the centre nearest the
        # obstacle matters, so one square root per group; centres along a link in
        # ascending order, so the nearest is found by bisection of the distance's slope.
        groups: dict[tuple[int, float], list[float]] = {}
        for link, offset, radius in zip(
            chain.sphere_links, chain.sphere_offsets_m, chain.sphere_radii_m, strict=True
        ):
            groups.setdefault((link, radius), []).append(offset)
        self._groups = tuple(
            (link, radius, tuple(sorted(o))) for (link, radius), o in groups.items()
        )
        self._ee_offset = chain.end_effector_offset_m
        self._obstacles = tuple(
            (o.center[0], o.center[1], o.center[2], o.radius)
            for o in limits.obstacles
            if isinstance(o, Sphere)
        )
        # With each centre's cx² + cy² and each group's size, for obstacles().
        self._obstacles_k = tuple((*o, o[0] * o[0] + o[1] * o[1]) for o in self._obstacles)
        # The base column (link 0) only yaws about its own axis, so its spheres' distances
        # to each obstacle never change: computed once, as obstacles() would (its start
        # is (0, base) and its direction vertical whatever the pose, and 0·x adds nothing).
        self._groups_n = tuple((*g, len(g[2])) for g in self._groups if g[0] != 0)
        column = tuple((*g, len(g[2])) for g in self._groups if g[0] == 0)
        self._column_best = math.inf
        for _, _, cz, radius, k in self._obstacles_k:
            for _, sphere_radius, offsets, _ in column:
                dz = self._base - cz
                base = 0.0 + k + dz * dz
                slope = 2.0 * (0.0 + 1.0 * dz)
                i = bisect_left(offsets, -0.5 * slope)
                d2 = math.inf
                for offset in offsets[i - 1 if i else 0 : i + 1]:
                    x = base + offset * (slope + offset)
                    if x < d2:
                        d2 = x
                d = math.sqrt(d2 if d2 > 0.0 else 0.0) - sphere_radius - radius
                if d < self._column_best:
                    self._column_best = d
        self._obstacle_margin = limits.obstacle_margin_m
        ws = limits.workspace
        self._ws = None if ws is None else (*ws.low, *ws.high)
        self._ws_margin = limits.workspace_margin_m

    def _frames(
        self, q: Sequence[float]
    ) -> tuple[float, float, list[float], list[float], list[float], list[float]]:
        """cos and sin of the yaw; per link its start (radial, height) and the sin and
        cos of its pitch."""
        # accumulate and map iterate in C; the sums run in the same order as a loop.
        pitch = list(accumulate(q[1:]))
        sin = [0.0, *map(math.sin, pitch)]
        cos = [1.0, *map(math.cos, pitch)]
        r = list(accumulate(map(operator.mul, self._lengths, sin), initial=0.0))
        z = list(accumulate(map(operator.mul, self._lengths, cos), initial=self._base))
        return math.cos(q[0]), math.sin(q[0]), r, z, sin, cos

    def obstacles(self, q: Sequence[float]) -> float:
        """Smallest surface distance of any arm sphere to any obstacle, minus the margin (m)."""
        # Hot path (the swept checks evaluate this several times per action): the frames
        # are built inline and each group's one or two candidate centres evaluated
        # directly; the arithmetic is _frames' and the loop's over a slice, op for op.
        sin_, cos_ = math.sin, math.cos
        pitch = list(accumulate(q[1:]))
        sin = [0.0, *map(sin_, pitch)]
        cos = [1.0, *map(cos_, pitch)]
        lengths = self._lengths
        r0 = list(accumulate(map(operator.mul, lengths, sin), initial=0.0))
        z0 = list(accumulate(map(operator.mul, lengths, cos), initial=self._base))
        yaw_cos = cos_(q[0])
        yaw_sin = sin_(q[0])
        # A NaN yaw makes every distance NaN, which obstacles() has always skipped.
        best = self._column_best if yaw_cos == yaw_cos else math.inf
        sqrt = math.sqrt
        for cx, cy, cz, radius, k in self._obstacles_k:
            # With a the obstacle centre's projection on the arm's plane, the squared
            # distance from it to the point `offset` along a link starting at (R, Z) with
            # unit direction u is A + offset·(B + offset): A = |start − centre|²
            # = R·(R − 2a) + cx² + cy² + (Z − cz)², B = 2·(start − centre)·u.
            a = cx * yaw_cos + cy * yaw_sin
            for link, sphere_radius, offsets, count in self._groups_n:
                r = r0[link]
                dz = z0[link] - cz
                base = r * (r - 2.0 * a) + k + dz * dz
                slope = 2.0 * (sin[link] * (r - a) + cos[link] * dz)
                # The squared distance is convex in the offset, least at −slope/2: only
                # the centres either side of that can be nearest.
                i = bisect_left(offsets, -0.5 * slope)
                d2 = math.inf
                offset = offsets[i - 1 if i else 0]
                x = base + offset * (slope + offset)
                if x < d2:
                    d2 = x
                if 0 < i < count:
                    offset = offsets[i]
                    x = base + offset * (slope + offset)
                    if x < d2:
                        d2 = x
                d = sqrt(d2 if d2 > 0.0 else 0.0) - sphere_radius - radius
                if d < best:
                    best = d
        return best - self._obstacle_margin

    def workspace(self, q: Sequence[float]) -> float:
        """Distance of the end effector inside the workspace box minus the margin (m)."""
        if self._ws is None:
            return math.inf
        yaw_cos, yaw_sin, r0, z0, sin, cos = self._frames(q)
        last = self._n - 1
        rr = r0[last] + self._ee_offset * sin[last]
        x = rr * yaw_cos
        y = rr * yaw_sin
        z = z0[last] + self._ee_offset * cos[last]
        lx, ly, lz, hx, hy, hz = self._ws
        return min(x - lx, y - ly, z - lz, hx - x, hy - y, hz - z) - self._ws_margin


def chain_clearance(limits: SafetyLimits, kinematics: Kinematics | None) -> ChainClearance | None:
    """A verified closed-form clearance for ``kinematics``, or None (see the module)."""
    # The optional Protocol is detected by its method (kinematics of other robots lack it).
    if kinematics is None or not hasattr(kinematics, "planar_chain"):
        return None
    chain = cast(ChainKinematics, kinematics).planar_chain()
    if chain is None or len(chain.link_lengths_m) != limits.n_joints:
        return None
    if any(not isinstance(o, Sphere) for o in limits.obstacles):
        return None
    fast = ChainClearance(limits, chain)
    exact = Clearance(limits)
    for probe in _PROBES:
        if len(probe) != limits.n_joints:
            return None
        q = np.asarray(probe, dtype=np.float64)
        pairs = [(fast.workspace(probe), exact.workspace(np.asarray(kinematics.end_effector(q))))]
        if limits.obstacles:
            centers, radii = kinematics.collision_spheres(q)
            pairs.append(
                (fast.obstacles(probe), exact.obstacles(np.asarray(centers), np.asarray(radii)))
            )
        for mine, theirs in pairs:
            if not (mine == theirs or abs(mine - theirs) <= _AGREEMENT_M):
                return None
    return fast
