"""Per-joint intervals of safe normalized torque for the next control step.

Each check becomes an interval ``[lo, hi]`` of the joint's normalized torque under the
supervisor's one-step model ``q̈ = G · (u − u_gravity − c·q̇)``, solved exactly over the
step (:mod:`tether.safety.response`; ``c`` is the smallest viscous damping the joint is
sure to have, 0 when none is declared). The gain ``G`` is not known exactly and the
worst case is taken on each side: pushing a joint faster uses the upper bound
``acceleration_per_action`` (the action may accelerate it that much), braking into the
hard position range uses the lower bound ``braking_deceleration`` (braking may achieve
only that much), and any other brake the upper one (it never reverses the joint). Any
damping above ``c`` only slows a joint moving toward a limit; one moving away it may
turn round sooner, so with damping that push is sized from rest:

- torque: ``|u| ≤ torque_limit / action_scale``;
- motion (position and velocity): the velocity after one step, ``v'``, must let the
  joint stop inside its margin-shrunk position range while braking at
  ``braking_deceleration`` (``v'·dt + v'²/2a ≤ d``, the braking-distance bound), and
  stay within the velocity limit; a joint beyond a limit gets a zero bound on that side,
  so it may only move back inward. Only the *hard* range (``hard_margin_rad``: the
  untightened one) is braked for at the weak gain; the velocity limit and a tightened
  range are braked for at the fast gain, so the brake never reverses the joint: a brake
  sized for the weak gain turns a joint around at the true one (45-90 times faster on
  the built-in arm), and a joint left outside a tightened range, braked that way toward
  it and then back under the halved velocity limit, chattered at full torque and walked
  across its true limit;
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
from tether.safety.response import step_response

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
        hard = limits.hard_margin_rad
        self.hard_hi_pos = [limits.position_high_rad[i] - hard[i] for i in range(n)]
        self.hard_lo_pos = [limits.position_low_rad[i] + hard[i] for i in range(n)]
        # Untightened limits: the hard range is the range, so its stopping speeds are the
        # same numbers and are not computed twice.
        self._tightened = hard != margin
        self.v_max = [float(x) for x in limits.velocity_limit_rad_s]
        self.a_gain = [float(x) for x in limits.acceleration_per_action_rad_s2]
        self.a_brake = [float(x) for x in limits.braking_deceleration_rad_s2]
        self.u_max = [limits.torque_limit_nm[i] / limits.action_scale_nm[i] for i in range(n)]
        self.u_accel = [limits.acceleration_limit_rad_s2[i] / self.a_gain[i] for i in range(n)]
        self.rate = [float(x) for x in limits.max_action_change_per_step]
        # The exact damped one-step response (tether.safety.response) at the fastest and
        # the weakest gain: velocity decay per step and push per rad/s of change.
        damping = limits.damping_per_rad_s
        fast = step_response(self.a_gain, damping, self.dt)
        weak = step_response(self.a_brake, damping, self.dt)
        self.per_velocity = list(fast.per_velocity)
        self._decay = list(fast.decay)
        self._step = list(fast.velocity_per_push)
        self._decay_weak = list(weak.decay)
        self._step_weak = list(weak.velocity_per_push)
        # Damped, a joint moving away from a limit may turn round sooner than the model's
        # (smallest) damping says, since more damping stops it faster; the supremum over
        # every larger damping is the motion from rest. Undamped, the model is exact.
        self._damped = [c > 0.0 for c in damping]
        self._reverse_decay = [0.0 if c > 0.0 else 1.0 for c in damping]
        # The one-step stop at the fastest gain: push per rad/s of the current velocity.
        self._stop_gain = [e * k for e, k in zip(fast.decay, fast.per_velocity, strict=True)]
        self.torque_lo = [-u for u in self.u_max]
        self._dt2 = self.dt * self.dt
        self._two_over_a = [2.0 / a for a in self.a_brake]
        self._no_rate_lo = [-math.inf] * n
        self._no_rate_hi = [math.inf] * n
        self._joints = list(
            zip(
                self.hi_pos,
                self.lo_pos,
                self.hard_hi_pos,
                self.hard_lo_pos,
                self.v_max,
                self.a_brake,
                self._two_over_a,
                self.per_velocity,
                self._decay,
                weak.per_velocity,
                self._decay_weak,
                self._stop_gain,
                self._damped,
                self.torque_lo,
                self.u_max,
                self.u_accel,
                self.rate,
                strict=True,
            )
        )

    def stopping_velocity(self, distance: float, joint: int) -> float:
        """Largest next-step speed from which braking still stops within ``distance`` (rad)."""
        d = distance if distance > 0.0 else 0.0
        return (math.sqrt(self._dt2 + d * self._two_over_a[joint]) - self.dt) * self.a_brake[joint]

    def bounds(
        self,
        q: Sequence[float],
        v: Sequence[float],
        u_gravity: Sequence[float],
        previous: Sequence[float] | None,
    ) -> JointBounds:
        # Hot path (every action). The helpers (stopping_velocity, _min, _max, _meet) are
        # written out inline: a Python call costs more than the arithmetic it wraps.
        # ``a if a > b else b`` is numpy.maximum's choice on ties, so signed zeros match.
        dt = self.dt
        dt2 = self._dt2
        sqrt = math.sqrt
        motion_lo: list[float] = []
        motion_hi: list[float] = []
        vel_lo: list[bool] = []
        vel_hi: list[bool] = []
        lo: list[float] = []
        hi: list[float] = []
        brake: list[float] = []
        accel_lo: list[float] = []
        accel_hi: list[float] = []
        rate_lo: list[float] = []
        rate_hi: list[float] = []
        narrow = False
        tightened = self._tightened
        for i, (
            hi_pos,
            lo_pos,
            hard_hi,
            hard_lo,
            v_max,
            a_brake,
            two_over_a,
            k,
            e,
            k_weak,
            e_weak,
            stop_gain,
            damped,
            t_lo,
            t_hi,
            u_acc,
            rate,
        ) in enumerate(self._joints):
            qi = q[i]
            vi = v[i]
            g = u_gravity[i]
            # Toward the upper limit ("up") and toward the lower one ("down"): the largest
            # next-step speed from which braking still stops inside the range.
            d = hi_pos - qi
            if not d > 0.0:
                d = 0.0
            stop_up = (sqrt(dt2 + d * two_over_a) - dt) * a_brake
            d = qi - lo_pos
            if not d > 0.0:
                d = 0.0
            stop_down = (sqrt(dt2 + d * two_over_a) - dt) * a_brake
            if tightened:
                d = hard_hi - qi
                if not d > 0.0:
                    d = 0.0
                hard_up = (sqrt(dt2 + d * two_over_a) - dt) * a_brake
                d = qi - hard_lo
                if not d > 0.0:
                    d = 0.0
                hard_down = (sqrt(dt2 + d * two_over_a) - dt) * a_brake
            else:
                hard_up = stop_up
                hard_down = stop_down
            up_velocity_bound = stop_up > v_max  # the velocity limit, not the position, binds
            down_velocity_bound = stop_down > v_max
            # Speed toward each limit (from rest when a damped joint moves away from it).
            v_up = vi if (vi > 0.0 or not damped) else 0.0
            v_down = -vi if (vi < 0.0 or not damped) else 0.0
            # Speed still allowed toward each limit, and the push that reaches it in one
            # step at the fast gain: it never reverses the joint, whatever the true gain.
            room_up = ((stop_up if stop_up < v_max else v_max) - v_up * e) * k
            room_down = ((stop_down if stop_down < v_max else v_max) - v_down * e) * k
            # The hard range: speeding up bounded at the fast gain, braking (faster than
            # the stopping speed allows) at the weak one, so the joint stops inside it at
            # any gain in the declared range and any damping from the declared one up.
            braking_up = hard_up - vi < 0
            braking_down = hard_down + vi < 0
            if braking_up:
                hard_room_up = (hard_up - vi * e_weak) * k_weak
            else:
                hard_room_up = (hard_up - v_up * e) * k
            if braking_down:
                hard_room_down = (hard_down - v_down * e_weak) * k_weak
            else:
                hard_room_down = (hard_down - v_down * e) * k
            if hard_room_up < room_up:
                room_up = hard_room_up
                up_velocity_bound = False
            if hard_room_down < room_down:
                room_down = hard_room_down
                down_velocity_bound = False
            m_hi = g + room_up
            m_lo = g - room_down
            if m_lo > m_hi:
                # With a fast upper and a weak lower gain bound, the brake needed to get
                # back under one bound may overshoot the other; braking toward the
                # violated side wins.
                m_lo, m_hi = (
                    (m_lo if m_lo < m_hi else m_hi) if braking_up else m_lo,
                    (m_lo if m_lo > m_hi else m_hi) if braking_down else m_hi,
                )
            motion_lo.append(m_lo)
            motion_hi.append(m_hi)
            vel_lo.append(down_velocity_bound)
            vel_hi.append(up_velocity_bound)
            # Torque meets motion (the torque interval has priority).
            x = t_lo if t_lo > m_lo else m_lo
            low = x if x < t_hi else t_hi
            x = t_hi if t_hi < m_hi else m_hi
            high = x if x > t_lo else t_lo
            # The action that stops the joint in one step at the fastest gain (at any
            # slower gain it still slows the joint, and it never reverses it: a dead-beat
            # brake at the weak gain overshoots, and the resulting chatter walks the arm
            # into what it should avoid). The acceleration and rate limits bound how the
            # policy drives the arm, never how hard the supervisor may stop it, so both
            # include this brake.
            x = g - vi * stop_gain
            x = x if x > low else low
            b = x if x < high else high
            x = g - u_acc
            a_lo = x if x < b else b
            x = g + u_acc
            a_hi = x if x > b else b
            x = low if low > a_lo else a_lo
            new_low = x if x < high else high
            x = high if high < a_hi else a_hi
            high = x if x > low else low
            low = new_low
            if previous is not None:
                x = previous[i] - rate
                r_lo = x if x < b else b
                x = previous[i] + rate
                r_hi = x if x > b else b
                rate_lo.append(r_lo)
                rate_hi.append(r_hi)
                x = low if low > r_lo else r_lo
                new_low = x if x < high else high
                x = high if high < r_hi else r_hi
                high = x if x > low else low
                low = new_low
            brake.append(b)
            accel_lo.append(a_lo)
            accel_hi.append(a_hi)
            lo.append(low)
            hi.append(high)
            if not high - low > 2 * _INSET:
                narrow = True
        if previous is None:
            rate_lo, rate_hi = self._no_rate_lo, self._no_rate_hi
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
    ) -> tuple[list[float], list[float] | None]:
        """Joint positions one step ahead plus the braking distance from there (rad), at
        both ends of the gain range where they differ.

        The first pose takes each joint's farthest continuation along its velocity (the
        fast gain where the action pushes along it, the weak one where it pushes against
        it); the second, only when some action pushes against its joint's velocity, takes
        the fast gain everywhere: there the action may reverse the joint, the other way.
        (An arm creeping out of a margin while its policy pushes back in turns around in
        one step at its true gain; predicting only the weak-gain continuation let it walk
        into the obstacle two steps at a time.) Linear extrapolation over the braking time
        covers exactly the stopping distance v'²/2a.
        """
        dt = self.dt
        ahead = [0.0] * self.n
        fast: list[float] | None = None
        for i in range(self.n):
            vi = v[i]
            push = u[i] - u_gravity[i]
            along = push * vi >= 0
            a_brake = self.a_brake[i]
            if along:
                v_next = vi * self._decay[i] + push * self._step[i]
            else:
                v_next = vi * self._decay_weak[i] + push * self._step_weak[i]
            ahead[i] = q[i] + v_next * dt + v_next * abs(v_next) / (2.0 * a_brake)
            if not along and fast is None:
                fast = ahead[:i] + [0.0] * (self.n - i)
            if fast is not None:
                if along:
                    fast[i] = ahead[i]
                else:
                    # Reversed at the fast gain, from rest when damped (see __init__).
                    v_next = vi * self._reverse_decay[i] + push * self._step[i]
                    fast[i] = q[i] + v_next * dt + v_next * abs(v_next) / (2.0 * a_brake)
        return ahead, fast


def maximum(a: float, b: float) -> float:
    """``numpy.maximum`` of two finite floats, including its choice on ties (the second
    argument), so a signed zero comes out exactly as in the elementwise formulation."""
    return a if a > b else b


def minimum(a: float, b: float) -> float:
    """``numpy.minimum`` of two finite floats (the second argument on ties)."""
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
