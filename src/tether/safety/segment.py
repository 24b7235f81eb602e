"""Swept clearance of a straight joint-space segment: whether the arm, moving from one
pose to another, would breach the workspace or an obstacle margin on the way.

A command is checked along the whole segment from the current pose to the commanded
one, not only at its end, so it cannot jump *through* an obstacle: poses are sampled
along the segment (``tether.safety.sweep``: spaced ``spacing_m`` apart by the reach
bound, the last one the end itself) and each is evaluated for each margin. A sample
inside a margin breaches only if it is no better than the start, so an arm already inside
a margin may leave it.

Evaluation is skipped wherever the reach bound (``tether.safety.reach``) proves it
cannot breach: a whole segment whose ends are both provably clear of the last pose
evaluated exactly (the bound is convex along a straight segment; ``proves_clear`` makes
that proof for all of a step's segments at once), a segment whose end is clearer than
the segment is long, and, within a sweep, the samples the start's bound, the end's bound
or the sample just measured put above the breach threshold (0, or the start's clearance
when that is lower). Clearances come in closed form where the kinematics offers it
(``tether.safety.chain``), else through the kinematics calls; a closed form's answers are
remembered for the last poses asked (a step's segments share their ends) and a segment
asked again in a row gets its answer back.

Invariant: the answer depends only on the two poses, the limits and the kinematics; the
anchors only decide which poses need evaluating, never what a pose's clearance is (so
``tests/safety/test_position_corpus.py`` holds the supervisor to decisions recorded
from it, bit for bit, and the compiled kernel, whose anchors differ, to the same).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import numpy as np

from tether.safety.chain import chain_clearance
from tether.safety.geometry import Clearance
from tether.safety.kinematics import Kinematics
from tether.safety.limits import SafetyLimits
from tether.safety.reach import SLACK_M, joint_reach
from tether.safety.sweep import path_count, path_pose, sample_count
from tether.safety.verdict import (
    OBSTACLE_BIT as _OBSTACLE,
    WORKSPACE_BIT as _WORKSPACE,
)

Measure = Callable[[Sequence[float]], float]


class SegmentClearance:
    """Workspace and obstacle checks of joint-space segments for one set of limits.

    Keeps one anchor per margin (the last pose it evaluated exactly and its clearance),
    so use one per robot.
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
        # The closed form, for the compiled kernel (tether.safety.position.kernel) too,
        # which evaluates the same closed form.
        self.chain = chain_clearance(limits, kinematics) if self.active else None
        # Closed forms are pure functions of the pose, so their answers can be reused.
        self._pure = self.chain is not None
        self._start_robot()

    def fresh(self) -> SegmentClearance:
        """The same checks for another robot: what the limits and kinematics give is
        shared, the robot's own memory (remembered clearances, anchors, last segment)
        starts empty."""
        other = copy.copy(self)
        other._start_robot()
        return other

    def continued(self) -> SegmentClearance:
        """The same checks continuing this robot on their own: its anchors and last
        segment as they are now, later ones apart (the remembered clearances, a pure
        function of the pose, start empty)."""
        other = self.fresh()
        other._last_segment = self._last_segment
        other._anchor = list(self._anchor)
        other._anchor_clearance = list(self._anchor_clearance)
        return other

    def _start_robot(self) -> None:
        """The checks with their own remembered clearances, no anchors, no last segment."""
        chain, clearance = self.chain, self._clearance
        checks: list[tuple[int, Measure]] = []
        if self.active and clearance.has_workspace:
            checks.append(
                (_WORKSPACE, _remembered(chain.workspace) if chain else self._workspace_exact)
            )
        if self.active and clearance.has_obstacles:
            checks.append(
                (_OBSTACLE, _remembered(chain.obstacles) if chain else self._obstacles_exact)
            )
        self._checks = tuple(checks)
        # The checks' bits in order, for the compiled kernel.
        self.check_bits = tuple(bit for bit, _ in checks)
        self._last_segment: tuple[list[float], list[float], tuple[int, float]] | None = None
        # Per check, the anchor: the last pose evaluated exactly (None: none yet, or its
        # clearance was not finite) and its clearance.
        self._anchor: list[list[float] | None] = [None] * len(checks)
        self._anchor_clearance = [0.0] * len(checks)

    def proves_clear(self, poses: Sequence[Sequence[float]]) -> bool:
        """Whether the reach bound proves, from the anchors alone, that no segment between
        any two of ``poses`` breaches: then :meth:`clear_fraction` of each such segment
        would skip every check (the same sums, in the same order, against the same
        anchors) and evaluate nothing, so calling it is not needed. False whenever a
        check has no anchor or the arm's reach is unknown."""
        reach = self._reach
        anchors = self._anchor
        if reach is None or None in anchors:
            return False
        clearances = self._anchor_clearance
        # The bound is convex along a segment: its ends decide. Summed as _margins sums
        # it, so each comparison below is the one it makes.
        if len(anchors) == 2:  # workspace and obstacles: both anchors in one pass
            first, second = anchors
            assert first is not None
            assert second is not None
            c0, c1 = clearances
            for pose in poses:
                s0 = s1 = 0.0
                for r, x, a, b in zip(reach, pose, first, second, strict=True):
                    d = x - a
                    s0 += r * (d if d > 0.0 else -d)
                    d = x - b
                    s1 += r * (d if d > 0.0 else -d)
                if not (c0 - s0 > SLACK_M and c1 - s1 > SLACK_M):
                    return False
            return True
        for anchor, c in zip(anchors, clearances, strict=True):
            assert anchor is not None
            for pose in poses:
                total = 0.0
                for r, x, a in zip(reach, pose, anchor, strict=True):
                    d = x - a
                    total += r * (d if d > 0.0 else -d)
                if not c - total > SLACK_M:
                    return False
        return True

    def breaches(self, start: Sequence[float], end: Sequence[float]) -> int:
        """The check bits (WORKSPACE, OBSTACLE) whose margin the segment breaches."""
        bits, _ = self.clear_fraction(start, end)
        return bits

    def clear_fraction(self, start: Sequence[float], end: Sequence[float]) -> tuple[int, float]:
        """The breached check bits and the largest fraction of the way from ``start``
        to ``end`` up to which every sample was found clear (1.0 when none breached)."""
        # The same segment asked again (a step's fallbacks often place the command where
        # it was already checked): the answer depends only on the two poses.
        last = self._last_segment
        if last is not None and last[0] == start and last[1] == end:
            return last[2]
        reach = self._reach
        checks = self._checks
        if reach is None:
            _, length = path_count(start, end, None, self._spacing, self._max_samples)
            margins = [(-math.inf, -math.inf)] * len(checks)
        else:
            length, margins = self._margins(reach, start, end)
        bits = 0
        fraction = 1.0
        # One list for the end pose, so checks anchored there share it (see _margins).
        end_pose = list(end)
        for index, (bit, measure) in enumerate(checks):
            at_start, at_end = margins[index]
            # Both ends proven clear: the bound is convex along the segment.
            if at_start > SLACK_M and at_end > SLACK_M:
                continue
            clear = self._sweep(start, end_pose, measure, index, at_start, length)
            if clear < 1.0:
                bits |= bit
                fraction = clear if clear < fraction else fraction
        if self._pure:
            self._last_segment = (list(start), end_pose, (bits, fraction))
        return bits, fraction

    def way_out(
        self,
        q: Sequence[float],
        bits: int,
        probe: float,
        tolerance: float,
        fraction: float,
        most: float,
    ) -> list[float] | None:
        """The joint change that takes a pose deep inside a margin part of the way out: of
        the checks in ``bits`` whose clearance at ``q`` is below ``-tolerance`` (m), the
        lowest (the first on a tie); its growth per joint by forward differences of
        ``probe`` rad; the change along that growth that regains ``fraction`` of the depth
        beyond ``tolerance`` where the clearance grows as it does at ``q``, shrunk so that
        no joint changes more than ``most`` rad. None when ``q`` lies that deep inside none
        of those margins, or the clearance does not change along any joint there."""
        worst = -tolerance
        chosen: Measure | None = None
        for bit, measure in self._checks:
            if bits & bit:
                clearance = measure(q)
                if clearance < worst:
                    worst, chosen = clearance, measure
        if chosen is None:
            return None
        probed = list(q)
        growth: list[float] = []
        squared = 0.0
        for j, x in enumerate(q):
            probed[j] = x + probe
            g = (chosen(probed) - worst) / probe
            probed[j] = x
            growth.append(g)
            squared += g * g
        if not squared > 0.0:
            return None
        scale = (-tolerance - worst) * fraction / squared
        change = [g * scale for g in growth]
        largest = max(map(abs, change))
        if largest > most:
            shrink = most / largest
            change = [c * shrink for c in change]
        return change

    def _margins(
        self, reach: Sequence[float], start: Sequence[float], end: Sequence[float]
    ) -> tuple[float, list[tuple[float, float]]]:
        """The segment's length by the reach bound, and per check lower bounds of the
        clearance at its start and its end from that check's anchor (-inf without one).
        One pass for up to two anchors (workspace, obstacles): this runs every step."""
        anchors = self._anchor
        first = anchors[0] if anchors and anchors[0] is not None else start
        second = anchors[1] if len(anchors) > 1 and anchors[1] is not None else start
        length = s0 = e0 = s1 = e1 = 0.0
        if second is first or second is start:
            # One anchor to measure from (both checks last evaluated at the same pose).
            for r, x, y, a in zip(reach, start, end, first, strict=True):
                d = y - x
                length += r * (d if d > 0.0 else -d)
                d = x - a
                s0 += r * (d if d > 0.0 else -d)
                d = y - a
                e0 += r * (d if d > 0.0 else -d)
            if second is first:
                s1, e1 = s0, e0
        else:
            for r, x, y, a, b in zip(reach, start, end, first, second, strict=True):
                d = y - x
                length += r * (d if d > 0.0 else -d)
                d = x - a
                s0 += r * (d if d > 0.0 else -d)
                d = y - a
                e0 += r * (d if d > 0.0 else -d)
                d = x - b
                s1 += r * (d if d > 0.0 else -d)
                d = y - b
                e1 += r * (d if d > 0.0 else -d)
        out: list[tuple[float, float]] = []
        for index, (to_start, to_end) in enumerate(((s0, e0), (s1, e1))[: len(anchors)]):
            if anchors[index] is None:
                out.append((-math.inf, -math.inf))
            else:
                c = self._anchor_clearance[index]
                out.append((c - to_start, c - to_end))
        for index in range(2, len(anchors)):  # more than two checks: one pass each
            anchor = anchors[index]
            if anchor is None:
                out.append((-math.inf, -math.inf))
                continue
            c = self._anchor_clearance[index]
            to_start = to_end = 0.0
            for r, x, y, a in zip(reach, start, end, anchor, strict=True):
                to_start += r * abs(x - a)
                to_end += r * abs(y - a)
            out.append((c - to_start, c - to_end))
        return length, out

    def _sweep(
        self,
        start: Sequence[float],
        end: list[float],
        measure: Measure,
        index: int,
        at_start: float,
        length: float,
    ) -> float:
        """The fraction of the segment before its first breaching sample (1.0: none).
        ``at_start`` is a lower bound of the clearance at ``start`` (-inf: none) and
        ``length`` the segment's length by the reach bound."""
        reach = self._reach
        # The end first: it is where the arm is headed, so it anchors the next segment
        # best. By the reach bound, a pose t along the segment (reach metric) has at
        # least max(at_start − t, ahead − (length − t)) of clearance, which stays above
        # the slack everywhere when the two bounds overlap.
        ahead = measure(end)
        if reach is not None and (
            ahead - length > SLACK_M
            or (at_start > SLACK_M and ahead > SLACK_M and at_start + ahead - length > 2 * SLACK_M)
        ):
            self._anchor_at(index, end, ahead)
            return 1.0
        # ``length`` is path_count's own sum (from _margins, term for term, or from
        # path_count itself without a reach), so the samples are path_count's.
        count = sample_count(length, self._spacing, self._max_samples)
        step = length / count
        end_clearance = ahead
        # A sample breaches when its clearance is at most 0 and at most the start's, i.e.
        # at most this threshold (min(0, start's) once the start is measured; 0 before,
        # which only proves less). Samples the reach bound puts above it are skipped:
        # from the start's bound, from the end's, and from each sample measured.
        threshold = 0.0
        now: float | None = None
        last: list[float] | None = None
        last_clearance = 0.0
        clear = 1.0
        k = 1
        bounded = reach is not None and step > 0.0
        if bounded and at_start > SLACK_M:
            k = max(1, math.ceil((at_start - SLACK_M) / step))
        while k <= count:
            if bounded and end_clearance - (count - k) * step > threshold + SLACK_M:
                # This sample and every later one are clear by the end's bound.
                last, last_clearance = end, end_clearance
                break
            pose = path_pose(start, end, k, count)
            ahead = measure(pose)
            last, last_clearance = pose, ahead
            # NaN (a broken model) compares false everywhere: it breaches.
            if not ahead > 0.0:
                if now is None:
                    now = measure(start)
                    if now < 0.0:
                        threshold = now
                if not ahead > now:
                    clear = (k - 1) / count
                    break
            k += 1
            if bounded and ahead - threshold > SLACK_M:
                # Samples within (clearance − threshold − slack) of this one, by the reach
                # bound, do not breach.
                k += max(0, math.ceil((ahead - threshold - SLACK_M) / step) - 1)
        if reach is not None and last is not None:
            self._anchor_at(index, last, last_clearance)
        return clear

    def _anchor_at(self, index: int, pose: list[float], clearance: float) -> None:
        finite = math.isfinite(clearance)
        self._anchor[index] = pose if finite else None
        self._anchor_clearance[index] = clearance if finite else 0.0

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


# Poses whose clearances a closed form remembers: one step's segments share their ends
# (the measured pose, the command, the previous command), and a held command or a
# command the policy repeats comes back next step.
_REMEMBERED_POSES = 64


def _remembered(measure: Measure) -> Measure:
    """``measure`` (a pure function of the pose: a closed form's) remembering the
    clearances of the last poses it was asked about. Keyed by the pose's values, so
    ``-0.0`` and ``0.0`` share an entry: a clearance can differ between them at most in
    the sign of an exact zero, which no comparison tells apart."""
    known: dict[tuple[float, ...], float] = {}

    def remembered(q: Sequence[float]) -> float:
        key = tuple(q)
        clearance = known.get(key)
        if clearance is None:
            if len(known) >= _REMEMBERED_POSES:
                known.clear()
            clearance = known[key] = measure(q)
        return clearance

    return remembered
