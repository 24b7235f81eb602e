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
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tether.safety.limits import SafetyLimits

# Output values are kept this far inside the final interval, so the float32 rounding
# of the executed action (< 6e-8 in [-1, 1]) can never push it back outside.
_INSET = 1e-6


class JointBounds(NamedTuple):
    """The per-check intervals for one state (all arrays shape (n,), float64)."""

    torque_lo: np.ndarray
    torque_hi: np.ndarray
    motion_lo: np.ndarray
    motion_hi: np.ndarray
    velocity_bound_lo: np.ndarray  # bool: the velocity limit, not the position, sets motion_lo
    velocity_bound_hi: np.ndarray  # bool: the same for motion_hi
    accel_lo: np.ndarray
    accel_hi: np.ndarray
    rate_lo: np.ndarray
    rate_hi: np.ndarray
    lo: np.ndarray  # final interval: every check, with priority fallback
    hi: np.ndarray
    inner_lo: np.ndarray  # final interval inset by _INSET, where outputs are placed
    inner_hi: np.ndarray
    brake: np.ndarray  # the non-reversing stop action, inside [lo, hi]


class JointEnvelope:
    """Computes :class:`JointBounds` for one set of limits (constants precomputed)."""

    def __init__(self, limits: SafetyLimits) -> None:
        f = np.float64
        self.dt = limits.control_period_s
        self.hi_pos = np.asarray(limits.position_high_rad, f) - np.asarray(
            limits.position_margin_rad, f
        )
        self.lo_pos = np.asarray(limits.position_low_rad, f) + np.asarray(
            limits.position_margin_rad, f
        )
        self.v_max = np.asarray(limits.velocity_limit_rad_s, f)
        self.a_gain = np.asarray(limits.acceleration_per_action_rad_s2, f)
        self.a_brake = np.asarray(limits.braking_deceleration_rad_s2, f)
        self.u_max = np.asarray(limits.torque_limit_nm, f) / np.asarray(limits.action_scale_nm, f)
        self.u_accel = np.asarray(limits.acceleration_limit_rad_s2, f) / self.a_gain
        self.rate = np.asarray(limits.max_action_change_per_step, f)
        # Actions that change v by 1 rad/s in one step, at the fastest and the weakest gain.
        self.per_velocity = 1.0 / (self.a_gain * self.dt)
        self.per_velocity_brake = 1.0 / (self.a_brake * self.dt)
        self.torque_lo = -self.u_max
        self._brake_extra = self.per_velocity_brake - self.per_velocity
        # Direction toward the upper (row 0) and the lower (row 1) limit, and the limits'
        # offsets, so that distance = offset - sign * q for both sides in one call.
        self._sign = np.array([[1.0], [-1.0]])
        self._limit_offset = np.stack([self.hi_pos, -self.lo_pos])
        self._dt2 = self.dt * self.dt
        self._two_over_a = 2.0 / self.a_brake
        self._no_rate_lo = np.full(limits.n_joints, -np.inf)
        self._no_rate_hi = np.full(limits.n_joints, np.inf)

    def stopping_velocity(self, distance: np.ndarray) -> np.ndarray:
        """Largest next-step speed from which braking still stops within ``distance`` (rad)."""
        d = np.maximum(distance, 0.0)
        speed: np.ndarray = np.sqrt(self._dt2 + d * self._two_over_a) - self.dt
        speed *= self.a_brake
        return speed

    def bounds(
        self, q: np.ndarray, v: np.ndarray, u_gravity: np.ndarray, previous: np.ndarray | None
    ) -> JointBounds:
        # Hot path (every action): few, elementwise numpy calls and no reductions, since
        # each call costs about a microsecond on a 7-vector.
        # Row 0 looks toward the upper limit, row 1 toward the lower one, so each step
        # below is one numpy call for both sides.
        distance = self._limit_offset - self._sign * q
        stop = self.stopping_velocity(distance)
        velocity_bound = stop > self.v_max  # the velocity limit, not the position, binds
        room = np.minimum(stop, self.v_max)
        room -= self._sign * v  # speed still allowed toward each limit; < 0: must brake
        braking = room < 0
        # Fast gain where the action speeds the joint up, weak gain where it must brake.
        room *= self.per_velocity + braking * self._brake_extra
        motion_hi = u_gravity + room[0]
        motion_lo = u_gravity - room[1]
        if any((motion_lo > motion_hi).tolist()):
            # With a fast upper and a weak lower gain bound, the brake needed to get back
            # under one bound may overshoot the other; braking toward the violated side wins.
            motion_lo, motion_hi = (
                np.where(braking[0], np.minimum(motion_lo, motion_hi), motion_lo),
                np.where(braking[1], np.maximum(motion_lo, motion_hi), motion_hi),
            )
        lo, hi = _meet(self.torque_lo, self.u_max, motion_lo, motion_hi)
        # The action that stops each joint in one step at the fastest gain (at any slower
        # gain it still slows the joint, and it never reverses it: a dead-beat brake at
        # the weak gain overshoots, and the resulting chatter walks the arm into what it
        # should avoid). The acceleration and rate limits bound how the policy drives the
        # arm, never how hard the supervisor may stop it, so both include this brake.
        brake = np.minimum(np.maximum(u_gravity - v * self.per_velocity, lo), hi)
        accel_lo = np.minimum(u_gravity - self.u_accel, brake)
        accel_hi = np.maximum(u_gravity + self.u_accel, brake)
        lo, hi = _meet(lo, hi, accel_lo, accel_hi)
        if previous is None:
            rate_lo, rate_hi = self._no_rate_lo, self._no_rate_hi
        else:
            rate_lo = np.minimum(previous - self.rate, brake)
            rate_hi = np.maximum(previous + self.rate, brake)
            lo, hi = _meet(lo, hi, rate_lo, rate_hi)
        if all((hi - lo > 2 * _INSET).tolist()):
            inner_lo = lo + _INSET
            inner_hi = hi - _INSET
        else:
            lo, hi = _float32_inward(lo, hi)
            wide = hi - lo > 2 * _INSET
            # A narrow interval's outputs are placed on its lower end: a float32 value, so
            # the cast cannot move them out.
            inner_lo = np.where(wide, lo + _INSET, lo)
            inner_hi = np.where(wide, hi - _INSET, lo)
        return JointBounds(
            self.torque_lo,
            self.u_max,
            motion_lo,
            motion_hi,
            velocity_bound[1],
            velocity_bound[0],
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
        self, q: np.ndarray, v: np.ndarray, u: np.ndarray, u_gravity: np.ndarray
    ) -> np.ndarray:
        """Joint positions one step ahead plus the braking distance from there (rad).

        Linear extrapolation over the braking time covers exactly the stopping distance
        v'²/2a, so a pose is "reachable before the arm can stop" iff it lies between
        ``q`` and this prediction.
        """
        push = u - u_gravity
        gain = np.where(push * v >= 0, self.a_gain, self.a_brake)
        v_next = v + push * gain * self.dt
        ahead: np.ndarray = q + v_next * self.dt + v_next * np.abs(v_next) / (2.0 * self.a_brake)
        return ahead


def _float32_inward(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Round the interval inward to float32 values, since the executed action is float32.

    An interval narrower than one float32 step becomes the nearest float32 point, which
    lies within half a step (< 3e-8 in [-1, 1]) of the exact one.
    """
    lo32 = lo.astype(np.float32)
    lo32 = np.where(lo32 < lo, np.nextafter(lo32, np.float32(np.inf)), lo32)
    hi32 = hi.astype(np.float32)
    hi32 = np.where(hi32 > hi, np.nextafter(hi32, np.float32(-np.inf)), hi32)
    point = (0.5 * (lo + hi)).astype(np.float32)
    narrow = lo32 > hi32
    return (
        np.where(narrow, point, lo32).astype(np.float64),
        np.where(narrow, point, hi32).astype(np.float64),
    )


def _meet(
    lo: np.ndarray, hi: np.ndarray, other_lo: np.ndarray, other_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Intersect [lo, hi] with [other_lo, other_hi]; where they do not overlap, the point
    of [lo, hi] nearest the other interval (the higher-priority interval wins)."""
    return (
        np.minimum(np.maximum(lo, other_lo), hi),
        np.maximum(np.minimum(hi, other_hi), lo),
    )
