"""Swept clearance of a straight joint-space segment: whether the arm, moving from one
pose to another, would breach the workspace or an obstacle margin on the way.

A command is checked along the whole segment from the current pose to the commanded
one, not only at its end, so it cannot jump *through* an obstacle: poses are sampled
along the segment (``tether.safety.sweep``: spaced ``spacing_m`` apart by the reach
bound, the last one the end itself) and each is evaluated for each margin. A sample
inside a margin breaches only if it is no better than the start, so an arm already inside
a margin may leave it.

Evaluation is skipped wherever the reach bound (``tether.safety.reach``) proves it clear:
a whole segment whose ends are both provably clear of the last pose evaluated exactly
(the bound is convex along a straight segment), a segment whose end is clearer than the
segment is long, and, within a sweep, every sample the clearance just measured proves
clear. Clearances come in closed form where the
kinematics offers it (``tether.safety.chain``), else through the kinematics calls.

Invariant: the answer depends only on the two poses, the limits and the kinematics; the
anchors only decide which poses need evaluating, never what a pose's clearance is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from tether.safety.chain import chain_clearance
from tether.safety.geometry import Clearance
from tether.safety.kinematics import Kinematics
from tether.safety.limits import SafetyLimits
from tether.safety.reach import SLACK_M, ClearanceAnchor, joint_reach
from tether.safety.sweep import path_count, path_pose
from tether.safety.verdict import SafetyCheck

_WORKSPACE = int(SafetyCheck.WORKSPACE)
_OBSTACLE = int(SafetyCheck.OBSTACLE)

Measure = Callable[[Sequence[float]], float]


class SegmentAnchor(ClearanceAnchor):
    """A :class:`ClearanceAnchor` that bounds the clearance at both ends of a segment
    in one pass."""

    __slots__ = ()

    def margins(self, start: Sequence[float], end: Sequence[float]) -> tuple[float, float]:
        """Lower bounds of the clearance at ``start`` and at ``end`` (m; -inf without an
        anchor): the anchor's clearance less the reach-bound distance to each."""
        anchor = self._q
        if anchor is None:
            return -math.inf, -math.inf
        to_start = to_end = 0.0
        for r, x, y, a in zip(self._reach, start, end, anchor, strict=True):
            d = x - a
            to_start += r * (d if d > 0.0 else -d)
            d = y - a
            to_end += r * (d if d > 0.0 else -d)
        return self._clearance - to_start, self._clearance - to_end


class SegmentClearance:
    """Workspace and obstacle checks of joint-space segments for one set of limits.

    Keeps one anchor per margin (the last pose it evaluated), so use one per robot.
    """

    def __init__(
        self,
        limits: SafetyLimits,
        kinematics: Kinematics | None,
        *,
        spacing_m: float,
        max_samples: int,
    ) -> None:
        clearance = Clearance(limits)
        self._spacing = spacing_m
        self._max_samples = max_samples
        self._kinematics = kinematics
        self._clearance = clearance
        self.active = kinematics is not None and (
            clearance.has_workspace or clearance.has_obstacles
        )
        reach = joint_reach(kinematics) if self.active and kinematics is not None else None
        self._reach = reach
        chain = chain_clearance(limits, kinematics) if self.active else None
        checks: list[tuple[int, Measure, SegmentAnchor | None]] = []
        if self.active and clearance.has_workspace:
            measure = chain.workspace if chain is not None else self._workspace_exact
            checks.append((_WORKSPACE, measure, None if reach is None else SegmentAnchor(reach)))
        if self.active and clearance.has_obstacles:
            measure = chain.obstacles if chain is not None else self._obstacles_exact
            checks.append((_OBSTACLE, measure, None if reach is None else SegmentAnchor(reach)))
        self._checks = tuple(checks)

    def breaches(self, start: Sequence[float], end: Sequence[float]) -> int:
        """The check bits (WORKSPACE, OBSTACLE) whose margin the segment breaches."""
        bits, _ = self.clear_fraction(start, end)
        return bits

    def clear_fraction(self, start: Sequence[float], end: Sequence[float]) -> tuple[int, float]:
        """The breached check bits and the largest fraction of the way from ``start``
        to ``end`` up to which every sample was found clear (1.0 when none breached)."""
        bits = 0
        fraction = 1.0
        for bit, measure, anchor in self._checks:
            at_start = -math.inf
            if anchor is not None:
                at_start, at_end = anchor.margins(start, end)
                # Both ends proven clear: the bound is convex along the segment.
                if at_start > SLACK_M and at_end > SLACK_M:
                    continue
            clear = self._sweep(start, end, measure, anchor, at_start)
            if clear < 1.0:
                bits |= bit
                fraction = clear if clear < fraction else fraction
        return bits, fraction

    def _sweep(
        self,
        start: Sequence[float],
        end: Sequence[float],
        measure: Measure,
        anchor: SegmentAnchor | None,
        at_start: float,
    ) -> float:
        """The fraction of the segment before its first breaching sample (1.0: none).
        ``at_start`` is a lower bound of the clearance at ``start`` (-inf: none)."""
        reach = self._reach
        count, length = path_count(start, end, reach, self._spacing, self._max_samples)
        # The end first: it is where the arm is headed, so it anchors the next segment
        # best. By the reach bound, a pose t along the segment (reach metric) has at
        # least max(at_start − t, ahead − (length − t)) of clearance, which stays above
        # the slack everywhere when the two bounds overlap.
        ahead = measure(end)
        if reach is not None and (
            ahead - length > SLACK_M
            or (at_start > SLACK_M and ahead > SLACK_M and at_start + ahead - length > 2 * SLACK_M)
        ):
            if anchor is not None:
                anchor.update(list(end), ahead)
            return 1.0
        step = length / count
        now: float | None = None
        last: list[float] | None = None
        last_clearance = 0.0
        clear = 1.0
        k = 1
        while k <= count:
            pose = path_pose(start, end, k, count)
            ahead = measure(pose)
            last, last_clearance = pose, ahead
            # NaN (a broken model) compares false everywhere: it breaches.
            if not ahead > 0.0:
                if now is None:
                    now = measure(start)
                if not ahead > now:
                    clear = (k - 1) / count
                    break
            k += 1
            if reach is not None and step > 0.0 and ahead > SLACK_M:
                # Samples within (clearance − slack) of this one, by the reach bound, are clear.
                k += max(0, math.ceil((ahead - SLACK_M) / step) - 1)
        if anchor is not None and last is not None:
            anchor.update(last, last_clearance)
        return clear

    def _workspace_exact(self, q: Sequence[float]) -> float:
        kin = self._kinematics
        assert kin is not None
        return self._clearance.workspace(np.asarray(kin.end_effector(np.array(q))))

    def _obstacles_exact(self, q: Sequence[float]) -> float:
        kin = self._kinematics
        assert kin is not None
        centers, radii = kin.collision_spheres(np.array(q))
        return self._clearance.obstacles(
            np.asarray(centers, dtype=np.float64), np.asarray(radii, dtype=np.float64)
        )
