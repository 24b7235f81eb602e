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

    def stopping_velocity(self, distance: np.ndarray) -> np.ndarray:
        """Largest next-step speed from which braking still stops within ``distance`` (rad)."""
        d = np.maximum(distance, 0.0)
        a, dt = self.a_brake, self.dt
        speed: np.ndarray = a * (np.sqrt(dt * dt + 2.0 * d / a) - dt)
        return speed

    def bounds(
        self, q: np.ndarray, v: np.ndarray, u_gravity: np.ndarray, previous: np.ndarray | None
    ) -> JointBounds:
        torque_lo, torque_hi = -self.u_max, self.u_max
        stop_hi = self.stopping_velocity(self.hi_pos - q)
        stop_lo = self.stopping_velocity(q - self.lo_pos)
        vel_hi = self.v_max < stop_hi
        vel_lo = self.v_max < stop_lo
        v_hi = np.minimum(stop_hi, self.v_max)
        v_lo = -np.minimum(stop_lo, self.v_max)
        motion_lo, motion_hi = self._motion(v, v_lo, v_hi, u_gravity)
        accel_lo = u_gravity - self.u_accel
        accel_hi = u_gravity + self.u_accel
        if previous is None:
            rate_lo = np.full_like(q, -np.inf)
            rate_hi = np.full_like(q, np.inf)
        else:
            rate_lo = previous - self.rate
            rate_hi = previous + self.rate
        lo, hi = _meet(torque_lo, torque_hi, motion_lo, motion_hi)
        lo, hi = _meet(lo, hi, accel_lo, accel_hi)
        lo, hi = _meet(lo, hi, rate_lo, rate_hi)
        wide = hi - lo > 2 * _INSET
        mid = 0.5 * (lo + hi)
        inner_lo = np.where(wide, lo + _INSET, mid)
        inner_hi = np.where(wide, hi - _INSET, mid)
        return JointBounds(
            torque_lo,
            torque_hi,
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
        )

    def _motion(
        self, v: np.ndarray, v_lo: np.ndarray, v_hi: np.ndarray, u_gravity: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Actions whose next-step velocity stays in [v_lo, v_hi] under the worst-case gain."""
        up = v_hi - v  # > 0: room to speed up (fast gain bounds it); < 0: must brake (weak gain)
        down = v_lo - v
        hi = u_gravity + np.where(up >= 0, up * self.per_velocity, up * self.per_velocity_brake)
        lo = u_gravity + np.where(
            down <= 0, down * self.per_velocity, down * self.per_velocity_brake
        )
        # With a fast upper and a weak lower gain bound, the brake needed to get back under
        # one bound may overshoot the other; then braking toward the violated side wins.
        crossed = lo > hi
        if np.any(crossed):
            pick = np.where(up < 0, hi, lo)
            lo = np.where(crossed, pick, lo)
            hi = np.where(crossed, pick, hi)
        return lo, hi

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


def _meet(
    lo: np.ndarray, hi: np.ndarray, other_lo: np.ndarray, other_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Intersect [lo, hi] with [other_lo, other_hi]; where empty, keep the point of
    [lo, hi] nearest the other interval (the higher-priority interval wins)."""
    new_lo = np.maximum(lo, other_lo)
    new_hi = np.minimum(hi, other_hi)
    empty = new_lo > new_hi
    if np.any(empty):
        nearest = np.where(other_hi < lo, lo, hi)
        new_lo = np.where(empty, nearest, new_lo)
        new_hi = np.where(empty, nearest, new_hi)
    return new_lo, new_hi
