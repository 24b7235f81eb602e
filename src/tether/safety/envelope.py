"""Per-joint intervals of safe normalized torque for the next control step.

Each check becomes an interval ``[lo, hi]`` of the joint's normalized torque under the
supervisor's one-step model ``q̈ = G · (u − u_gravity)``, where the gain ``G`` is not
known exactly and the worst case is taken on each side: pushing a joint faster uses the
upper bound ``acceleration_per_action`` (the action may accelerate it that much), braking
uses the lower bound ``braking_deceleration`` (braking may achieve only that much):

- torque: ``|u| ≤ torque_limit / action_scale``;
- motion (position and velocity): the velocity after one step, ``v'``, must let the
  joint stop inside its margin-shrunk position range while braking at
  ``braking_deceleration`` (``v'·dt + v'²/2a ≤ d``, the braking-distance bound), and
  stay within the velocity limit; a joint beyond a limit gets a zero bound on that side,
  so it may only move back inward;
- acceleration: ``|q̈| ≤ acceleration_limit``;
- rate: ``|u − u_previous| ≤ max_action_change_per_step``.

The acceleration and rate intervals are widened to include the one-step brake, so they
limit how the policy drives the arm but never how hard the supervisor may stop it.

Invariant: the intervals are intersected in that priority order and a lower-priority
interval that would empty the set yields to the higher ones, so the result is never
empty, and it depends only on the state and the previous action, never on the
proposal; that is what makes filtering idempotent.

The arithmetic is plain Python floats, joint by joint: numpy costs about a microsecond
per call on a 7-vector, more than the whole per-joint computation. Every operation is
the IEEE double one numpy would do, in the same order, so the intervals are the same
to the bit as an elementwise numpy formulation (``tests/safety/reference.py`` keeps one
as the oracle).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from tether.safety.limits import SafetyLimits

# Output values are kept this far inside the final interval, so the float32 rounding
# of the executed action (< 6e-8 in [-1, 1]) can never push it back outside.
_INSET = 1e-6


class JointBounds(NamedTuple):
    """The per-check intervals for one state (lists of n floats; flags are bools)."""

    torque_lo: list[float]
    torque_hi: list[float]
    motion_lo: list[float]
    motion_hi: list[float]
    velocity_bound_lo: list[bool]  # the velocity limit, not the position, sets motion_lo
    velocity_bound_hi: list[bool]  # the same for motion_hi
    accel_lo: list[float]
    accel_hi: list[float]
    rate_lo: list[float]
    rate_hi: list[float]
    lo: list[float]  # final interval: every check, with priority fallback
    hi: list[float]
    inner_lo: list[float]  # final interval inset by _INSET, where outputs are placed
    inner_hi: list[float]
    brake: list[float]  # the non-reversing stop action, inside [lo, hi]


class JointEnvelope:
    """Computes :class:`JointBounds` for one set of limits (constants precomputed)."""

    def __init__(self, limits: SafetyLimits) -> None:
        n = limits.n_joints
        self.n = n
        self.dt = limits.control_period_s
        margin = limits.position_margin_rad
        self.hi_pos = [limits.position_high_rad[i] - margin[i] for i in range(n)]
        self.lo_pos = [limits.position_low_rad[i] + margin[i] for i in range(n)]
        self.v_max = [float(x) for x in limits.velocity_limit_rad_s]
        self.a_gain = [float(x) for x in limits.acceleration_per_action_rad_s2]
        self.a_brake = [float(x) for x in limits.braking_deceleration_rad_s2]
        self.u_max = [limits.torque_limit_nm[i] / limits.action_scale_nm[i] for i in range(n)]
        self.u_accel = [limits.acceleration_limit_rad_s2[i] / self.a_gain[i] for i in range(n)]
        self.rate = [float(x) for x in limits.max_action_change_per_step]
        # Actions that change v by 1 rad/s in one step, at the fastest and the weakest gain.
        self.per_velocity = [1.0 / (a * self.dt) for a in self.a_gain]
        self.per_velocity_brake = [1.0 / (a * self.dt) for a in self.a_brake]
        self.torque_lo = [-u for u in self.u_max]
        self._brake_extra = [
            pb - p for pb, p in zip(self.per_velocity_brake, self.per_velocity, strict=True)
        ]
        self._dt2 = self.dt * self.dt
        self._two_over_a = [2.0 / a for a in self.a_brake]
        self._no_rate_lo = [-math.inf] * n
        self._no_rate_hi = [math.inf] * n

    def stopping_velocity(self, distance: float, joint: int) -> float:
        """Largest next-step speed from which braking still stops within ``distance`` (rad)."""
        d = _max(distance, 0.0)
        speed = math.sqrt(self._dt2 + d * self._two_over_a[joint]) - self.dt
        return speed * self.a_brake[joint]

    def bounds(
        self,
        q: Sequence[float],
        v: Sequence[float],
        u_gravity: Sequence[float],
        previous: Sequence[float] | None,
    ) -> JointBounds:
        n = self.n
        motion_lo = [0.0] * n
        motion_hi = [0.0] * n
        vel_lo = [False] * n
        vel_hi = [False] * n
        lo = [0.0] * n
        hi = [0.0] * n
        brake = [0.0] * n
        accel_lo = [0.0] * n
        accel_hi = [0.0] * n
        rate_lo, rate_hi = (
            (self._no_rate_lo, self._no_rate_hi)
            if previous is None
            else (
                [0.0] * n,
                [0.0] * n,
            )
        )
        narrow = False
        for i in range(n):
            qi = q[i]
            vi = v[i]
            g = u_gravity[i]
            v_max = self.v_max[i]
            # Toward the upper limit ("up") and toward the lower one ("down").
            stop_up = self.stopping_velocity(self.hi_pos[i] - qi, i)
            stop_down = self.stopping_velocity(qi - self.lo_pos[i], i)
            vel_hi[i] = stop_up > v_max  # the velocity limit, not the position, binds
            vel_lo[i] = stop_down > v_max
            room_up = _min(stop_up, v_max) - vi  # speed still allowed; < 0: must brake
            room_down = _min(stop_down, v_max) + vi
            braking_up = room_up < 0
            braking_down = room_down < 0
            # Fast gain where the action speeds the joint up, weak gain where it must brake.
            p = self.per_velocity[i]
            room_up *= p + (self._brake_extra[i] if braking_up else 0.0)
            room_down *= p + (self._brake_extra[i] if braking_down else 0.0)
            m_hi = g + room_up
            m_lo = g - room_down
            if m_lo > m_hi:
                # With a fast upper and a weak lower gain bound, the brake needed to get
                # back under one bound may overshoot the other; braking toward the
                # violated side wins.
                m_lo, m_hi = (
                    _min(m_lo, m_hi) if braking_up else m_lo,
                    _max(m_lo, m_hi) if braking_down else m_hi,
                )
            motion_lo[i] = m_lo
            motion_hi[i] = m_hi
            low, high = _meet(self.torque_lo[i], self.u_max[i], m_lo, m_hi)
            # The action that stops the joint in one step at the fastest gain (at any
            # slower gain it still slows the joint, and it never reverses it: a dead-beat
            # brake at the weak gain overshoots, and the resulting chatter walks the arm
            # into what it should avoid). The acceleration and rate limits bound how the
            # policy drives the arm, never how hard the supervisor may stop it, so both
            # include this brake.
            b = _min(_max(g - vi * p, low), high)
            a_lo = _min(g - self.u_accel[i], b)
            a_hi = _max(g + self.u_accel[i], b)
            low, high = _meet(low, high, a_lo, a_hi)
            if previous is not None:
                r_lo = _min(previous[i] - self.rate[i], b)
                r_hi = _max(previous[i] + self.rate[i], b)
                rate_lo[i] = r_lo
                rate_hi[i] = r_hi
                low, high = _meet(low, high, r_lo, r_hi)
            brake[i] = b
            accel_lo[i] = a_lo
            accel_hi[i] = a_hi
            lo[i] = low
            hi[i] = high
            narrow = narrow or not high - low > 2 * _INSET
        if not narrow:
            inner_lo = [x + _INSET for x in lo]
            inner_hi = [x - _INSET for x in hi]
        else:
            lo, hi = _float32_inward(lo, hi)
            # A narrow interval's outputs are placed on its lower end: a float32 value, so
            # the cast cannot move them out.
            inner_lo = [
                a + _INSET if b - a > 2 * _INSET else a for a, b in zip(lo, hi, strict=True)
            ]
            inner_hi = [
                b - _INSET if b - a > 2 * _INSET else a for a, b in zip(lo, hi, strict=True)
            ]
        return JointBounds(
            self.torque_lo,
            self.u_max,
            motion_lo,
            motion_hi,
            vel_lo,
            vel_hi,
            accel_lo,
            accel_hi,
            rate_lo,
            rate_hi,
            lo,
            hi,
            inner_lo,
            inner_hi,
            brake,
        )

    def predict(
        self, q: Sequence[float], v: Sequence[float], u: Sequence[float], u_gravity: Sequence[float]
    ) -> list[float]:
        """Joint positions one step ahead plus the braking distance from there (rad).

        Linear extrapolation over the braking time covers exactly the stopping distance
        v'²/2a, so a pose is "reachable before the arm can stop" iff it lies between
        ``q`` and this prediction.
        """
        dt = self.dt
        ahead = [0.0] * self.n
        for i in range(self.n):
            vi = v[i]
            push = u[i] - u_gravity[i]
            gain = self.a_gain[i] if push * vi >= 0 else self.a_brake[i]
            v_next = vi + push * gain * dt
            ahead[i] = q[i] + v_next * dt + v_next * abs(v_next) / (2.0 * self.a_brake[i])
        return ahead


def _max(a: float, b: float) -> float:
    # numpy.maximum's choice on ties (the second argument), so a signed zero comes out
    # exactly as in the elementwise formulation.
    return a if a > b else b


def _min(a: float, b: float) -> float:
    return a if a < b else b


def _float32_inward(lo: list[float], hi: list[float]) -> tuple[list[float], list[float]]:
    """Round the interval inward to float32 values, since the executed action is float32.

    An interval narrower than one float32 step becomes the nearest float32 point, which
    lies within half a step (< 3e-8 in [-1, 1]) of the exact one. (Rare: numpy here.)
    """
    lo64 = np.asarray(lo)
    hi64 = np.asarray(hi)
    lo32 = lo64.astype(np.float32)
    lo32 = np.where(lo32 < lo64, np.nextafter(lo32, np.float32(np.inf)), lo32)
    hi32 = hi64.astype(np.float32)
    hi32 = np.where(hi32 > hi64, np.nextafter(hi32, np.float32(-np.inf)), hi32)
    point = (0.5 * (lo64 + hi64)).astype(np.float32)
    narrow = lo32 > hi32
    return (
        np.where(narrow, point, lo32).astype(np.float64).tolist(),
        np.where(narrow, point, hi32).astype(np.float64).tolist(),
    )


def _meet(lo: float, hi: float, other_lo: float, other_hi: float) -> tuple[float, float]:
    """Intersect [lo, hi] with [other_lo, other_hi]; where they do not overlap, the point
    of [lo, hi] nearest the other interval (the higher-priority interval wins)."""
    return _min(_max(lo, other_lo), hi), _max(_min(hi, other_hi), lo)
