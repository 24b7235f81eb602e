"""Per-joint intervals of safe commanded position for the next control step.

Each joint check is an interval of the commanded position ``c`` (rad), from the state
(measured ``q``, ``q̇``), the nominal gravity torque ``g`` (N·m), the reference ``r`` (the
previous command, or ``q`` when there is none), the previous command's own change
``Δp`` (rad per step) and the robot's learnt sag ``σ`` (rad). With ``dt`` the control
period, ``s = acceleration_limit·dt²`` (the command's own acceleration) and
``b = min(braking_deceleration·dt², s)`` (the deceleration the robot can guarantee):

1. ``POSITION`` (hard range): ``c`` inside the untightened range shrunk by its margin.
2. ``VELOCITY`` (per-step change): ``|c − r| ≤ velocity_limit·dt``.
3. ``POSITION`` (range with margin, braking): where the arm settles under the command
   (``c`` plus the robot's sag ``σ``, the offset it rests at from a steady command, where
   that points toward the limit) must still be able to stop inside the margin-shrunk
   range decelerating at ``b``: ``c + max(σ, 0) + (c − r)²/(2b) ≤ high`` (and the mirror
   image), i.e. ``c − r ≤ b·(√(1 + 2d/b) − 1)`` with ``d`` the distance from ``r`` to the
   limit less that sag, so a command slows along a braking curve instead of being
   clamped at the limit (which would break the acceleration limit). From a command that
   met this bound, braking by ``b ≤ s`` meets it again, so checks 3 and 4 never conflict
   on a command this envelope produced under the same sag; a sag that grows toward a
   limit steers a command already there back like a tightened range. A sag away from
   the limit never loosens it.
4. ``ACCELERATION`` (change of the change): ``|(c − r) − Δp| ≤ s``. A command outside
   this interval is not simply clipped to its nearer end: it is moved toward the
   proposal no faster than it could still stop there at ``s`` per step, then into the
   interval, so a corrected command brakes onto a target instead of overshooting it and
   ringing about it (what a clip of the change of the change does).
5. ``TORQUE``: the impedance torque the command demands,
   ``Kp·(c − q) − Kd·q̇ + g``, within ``±torque_limit_nm``.

The intervals are intersected in that order and a later one that would empty the set
yields: the set becomes the end of the set so far nearest to it (kept a float32-safe
inset inside it). So the result is never
empty, the hard range always holds, and the later checks hold whenever they can all
hold together (a command left outside a tightened range by a switch of level is
steered back at the velocity limit rather than jumped in; a lagging arm whose command is
far ahead saturates its torque rather than have its command jump back).

Invariant: the intervals depend only on the state, the reference, ``Δp`` and the sag,
never on the proposed command, which is what makes filtering idempotent. Arithmetic is plain
Python floats, joint by joint: numpy costs about a microsecond per call on a 4-vector,
more than the whole per-joint computation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from tether.safety.limits import SafetyLimits
from tether.safety.position.impedance import ImpedanceModel
from tether.safety.verdict import (
    ACCELERATION_BIT as _ACCELERATION,
    POSITION_BIT as _POSITION,
    TORQUE_BIT as _TORQUE,
    VELOCITY_BIT as _VELOCITY,
    SafetyCheck,
)


class JointResult(NamedTuple):
    """A command put through the joint checks."""

    values: list[float]  # the command inside every interval (the input itself if it was)
    inside: bool  # the command was inside every interval already
    checks: int  # the check bits that moved it
    # Squared distance (rad², summed over joints) each check moved it, in the order
    # POSITION, VELOCITY, ACCELERATION, TORQUE (MOVED_CHECKS).
    moved: tuple[float, float, float, float]


MOVED_CHECKS = (
    SafetyCheck.POSITION,
    SafetyCheck.VELOCITY,
    SafetyCheck.ACCELERATION,
    SafetyCheck.TORQUE,
)


def inset(x: float) -> float:
    """How far inside an interval's end a placed command is kept (rad): more than half a
    float32 ulp at ``x``, so the float32 command never rounds back outside."""
    return 1e-6 * (1.0 + abs(x))


class CommandEnvelope:
    """The joint checks for one set of limits and gains (constants precomputed)."""

    def __init__(self, limits: SafetyLimits, impedance: ImpedanceModel) -> None:
        n = limits.n_joints
        if impedance.n_joints != n:
            raise ValueError(
                f"ImpedanceModel has gains for {impedance.n_joints} joints, the limits for "
                f"{n} ({limits.joint_names})"
            )
        self.n = n
        self.dt = dt = limits.control_period_s
        low, high = limits.position_low_rad, limits.position_high_rad
        margin, hard = limits.position_margin_rad, limits.hard_margin_rad
        self.hard_lo = [low[i] + hard[i] for i in range(n)]
        self.hard_hi = [high[i] - hard[i] for i in range(n)]
        self._hard_in = [
            (lo + inset(lo), hi - inset(hi))
            for lo, hi in zip(self.hard_lo, self.hard_hi, strict=True)
        ]
        self.soft_lo = [low[i] + margin[i] for i in range(n)]
        self.soft_hi = [high[i] - margin[i] for i in range(n)]
        self.step = [v * dt for v in limits.velocity_limit_rad_s]
        self.accel_step = [a * dt * dt for a in limits.acceleration_limit_rad_s2]
        # The braking curve relies on the deceleration the robot can guarantee, never on
        # more than the commanded acceleration allows (so checks 3 and 4 cannot conflict).
        self.brake_step = [
            min(b * dt * dt, s)
            for b, s in zip(limits.braking_deceleration_rad_s2, self.accel_step, strict=True)
        ]
        self.stiffness = list(impedance.stiffness_nm_per_rad)
        self.damping = list(impedance.damping_nm_s_per_rad)
        self.torque = list(limits.torque_limit_nm)
        self._joints = tuple(
            zip(
                self.hard_lo,
                self.hard_hi,
                self.soft_lo,
                self.soft_hi,
                self.step,
                self.accel_step,
                [2.0 / s for s in self.accel_step],
                self.brake_step,
                [2.0 / b for b in self.brake_step],
                # The distance to a limit beyond which the braking curve allows more
                # than the per-step change: step + step²/(2b).
                [
                    st + st * st / (2.0 * b)
                    for st, b in zip(self.step, self.brake_step, strict=True)
                ],
                self.stiffness,
                self.damping,
                self.torque,
                self._hard_in,
                strict=True,
            )
        )

    def clip(
        self,
        q: Sequence[float],
        v: Sequence[float],
        gravity_nm: Sequence[float],
        reference: Sequence[float],
        previous_change: Sequence[float],
        command: Sequence[float],
        sag: Sequence[float],
        exact: bool = True,
    ) -> JointResult:
        """``command`` moved into every interval for this state and the robot's ``sag``
        (check 3), and which checks moved it how far. ``exact``: the command's values are
        float32 already (a policy's command), so one inside every interval is returned as
        it is; otherwise (a backup's target, a backed-off command) every value is kept
        ``inset`` inside."""
        # Hot path (every command): the interval meets are written out inline, since a
        # Python call costs more than the arithmetic it wraps.
        sqrt = math.sqrt
        out: list[float] = []
        inside = exact
        checks = 0
        m_pos = m_vel = m_acc = m_tau = 0.0
        for (
            h_lo,
            h_hi,
            s_lo,
            s_hi,
            step,
            s,
            two_over_s,
            brake,
            two_over_b,
            far,
            kp,
            kd,
            tau,
            hard_in,
        ), r, dp, qi, vi, gi, x, sg in zip(
            self._joints, reference, previous_change, q, v, gravity_nm, command, sag, strict=True
        ):
            # 1. hard range.
            lo1, hi1 = h_lo, h_hi
            # 2. per-step change.
            a = r - step
            b = r + step
            lo2 = a if a > lo1 else lo1
            hi2 = b if b < hi1 else hi1
            if lo2 > hi2:
                lo2 = hi2 = _edge(lo1, hi1, b < lo1)
            # 3. range with margin where the arm settles (less a sag toward the limit),
            # reachable with a braking curve at the acceleration limit (from `far` on,
            # the curve allows more than the per-step change).
            if sg > 0.0:
                s_hi -= sg
            elif sg < 0.0:
                s_lo -= sg
            hi3 = hi2
            d = s_hi - r
            if d < far:
                b = r + brake * (sqrt(1.0 + d * two_over_b) - 1.0) if d > 0.0 else s_hi
                if b < hi3:
                    hi3 = b
            lo3 = lo2
            d = r - s_lo
            if d < far:
                a = r - brake * (sqrt(1.0 + d * two_over_b) - 1.0) if d > 0.0 else s_lo
                if a > lo3:
                    lo3 = a
            if lo3 > hi3:
                lo3 = hi3 = _edge(lo2, hi2, hi3 < lo2)
            # 4. change of the change.
            center = r + dp
            a = center - s
            b = center + s
            lo4 = a if a > lo3 else lo3
            hi4 = b if b < hi3 else hi3
            if lo4 > hi4:
                lo4 = hi4 = _edge(lo3, hi3, b < lo3)
            # 5. impedance torque within the motor limit.
            bias = kd * vi - gi
            a = qi + (bias - tau) / kp
            b = qi + (bias + tau) / kp
            lo5 = a if a > lo4 else lo4
            hi5 = b if b < hi4 else hi4
            if lo5 > hi5:
                lo5 = hi5 = _edge(lo4, hi4, b < lo4)

            if exact and lo5 <= x <= hi5:
                out.append(x)
                continue
            inside = False
            # Which checks move it, and how far: clipped into each check's (nested)
            # interval in turn.
            y = lo1 if x < lo1 else hi1 if x > hi1 else x
            z = lo2 if y < lo2 else hi2 if y > hi2 else y
            if y != x:
                checks |= _POSITION
                m_pos += (y - x) * (y - x)
            if z != y:
                checks |= _VELOCITY
                m_vel += (z - y) * (z - y)
            y = lo3 if z < lo3 else hi3 if z > hi3 else z
            if y != z:
                checks |= _POSITION
                m_pos += (y - z) * (y - z)
            if y < lo4 or y > hi4:
                # Toward the proposal (inside the hard range) no faster than the command
                # can still stop there at this acceleration (change u with
                # u + (u - s) + ... = |x - r|), so a corrected command brakes onto its
                # target instead of overshooting it and ringing about it. The distance
                # is the proposal's own, not the rate-limited y's: braking onto y (at
                # most one step away) would crawl.
                d = (lo1 if x < lo1 else hi1 if x > hi1 else x) - r
                ad = d if d > 0.0 else -d
                u = s * (sqrt(0.25 + ad * two_over_s) - 0.5)
                z = r + (d if ad <= u else u if d > 0.0 else -u)
                z = lo4 if z < lo4 else hi4 if z > hi4 else z
            else:
                z = y
            if z != y:
                checks |= _ACCELERATION
                m_acc += (z - y) * (z - y)
            y = lo5 if z < lo5 else hi5 if z > hi5 else z
            if y != z:
                checks |= _TORQUE
                m_tau += (y - z) * (y - z)
            # Placed inset inside the final interval (inset() written out), and always
            # inside the hard range.
            lo_in = lo5 + 1e-6 * (1.0 + (lo5 if lo5 > 0.0 else -lo5))
            hi_in = hi5 - 1e-6 * (1.0 + (hi5 if hi5 > 0.0 else -hi5))
            if lo_in <= hi_in:
                y = lo_in if y < lo_in else hi_in if y > hi_in else y
            else:
                y = _narrow(lo5, hi5, (lo1, hi1, lo2, hi2, lo3, hi3, lo4, hi4))
            h_lo, h_hi = hard_in
            out.append(h_lo if y < h_lo else h_hi if y > h_hi else y)
        return JointResult(out, inside, checks, (m_pos, m_vel, m_acc, m_tau))

    def hold(self, pose: Sequence[float]) -> list[float]:
        """``pose`` moved inside the hard range (kept ``inset`` inside its ends)."""
        return [
            lo if x < lo else hi if x > hi else x
            for x, (lo, hi) in zip(pose, self._hard_in, strict=True)
        ]


def _narrow(lo: float, hi: float, earlier: tuple[float, ...]) -> float:
    """A command for a final interval too narrow to hold a float32 inset inside it: its
    middle, moved inset inside every earlier interval (lo_1, hi_1, lo_2, …) wide enough
    for that, so rounding can break only the latest checks, by less than the inset."""
    y = 0.5 * (lo + hi)
    for k in range(0, len(earlier), 2):
        a, b = earlier[k], earlier[k + 1]
        a += inset(a)
        b -= inset(b)
        if a > b:
            break  # this one and (nested) every later one are narrow
        y = a if y < a else b if y > b else y
    return y


def _edge(lo: float, hi: float, low_side: bool) -> float:
    """Where the set ``[lo, hi]`` collapses when a later interval on the ``low_side`` (or
    the high one) yields: at that end, kept ``inset`` inside it (at most to the middle),
    so the float32 command stays inside every earlier interval."""
    mid = 0.5 * (lo + hi)
    if low_side:
        x = lo + inset(lo)
        return x if x < mid else mid
    x = hi - inset(hi)
    return x if x > mid else mid
