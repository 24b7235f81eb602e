"""The straightforward reference supervisor: the test oracle of ``Supervisor``.

This is the supervisor as it was before its hot path was rewritten in scalar Python
and taught to skip forward kinematics near no obstacle: the intervals as elementwise
numpy over all joints (``ReferenceEnvelope``), and every predicted pose through the
kinematics. It is deliberately kept simple and unoptimized; ``test_equivalence.py``
asserts that ``Supervisor`` returns the same float32 bytes and the same verdict on every
call, and ``benchmarks/bench_supervisor.py`` times both side by side.
"""

from __future__ import annotations

import math
import operator
import sys
from typing import Any, NamedTuple

import numpy as np

from tether.safety import SafetyLimits, Supervisor, SupervisorConfig
from tether.safety.backups import Backup
from tether.safety.chain import chain_clearance
from tether.safety.envelope import _float32_inward as float32_inward
from tether.safety.kinematics import Kinematics
from tether.safety.supervisor import (  # the same check bits, constants and input parsing
    _ACCELERATION,
    _HUGE,
    _INVALID_PREVIOUS,
    _INVALID_SHAPE,
    _NON_FINITE,
    _OBSTACLE,
    _POSITION,
    _RATE,
    _REPLACING,
    _STALE,
    _TAKEOVER,
    _TORQUE,
    _VELOCITY,
    _WORKSPACE,
    _array,
    _spheres,
)
from tether.safety.sweep import path_samples
from tether.safety.verdict import (
    PASSED,
    ActionSource,
    SafetyCheck,
    SafetyVerdict,
)

# Output values are kept this far inside the final interval, so the float32 rounding
# of the executed action (< 6e-8 in [-1, 1]) can never push it back outside.
_INSET = 1e-6


class ReferenceBounds(NamedTuple):
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


class ReferenceEnvelope:
    """Computes :class:`ReferenceBounds` for one set of limits (constants precomputed)."""

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
        # The exact solution of q̈ = G·(p − c·v) over one step at the fastest and the
        # weakest gain: v' = v·decay + p·step, and p = (v' − v·decay)·per_velocity.
        damping = np.asarray(limits.damping_per_rad_s, f)
        self.decay, self.per_velocity, self.step = _response(self.a_gain, damping, self.dt)
        self.decay_weak, self.per_velocity_weak, self.step_weak = _response(
            self.a_brake, damping, self.dt
        )
        # Damped, a joint moving away from a limit is sized as if at rest (more damping
        # than assumed turns it round sooner); undamped, the model is exact.
        self._damped = damping > 0
        self.torque_lo = -self.u_max
        # Direction toward the upper (row 0) and the lower (row 1) limit, and the limits'
        # offsets, so that distance = offset - sign * q for both sides in one call.
        self._sign = np.array([[1.0], [-1.0]])
        self._limit_offset = np.stack([self.hi_pos, -self.lo_pos])
        hard = np.asarray(limits.hard_margin_rad, f)
        self._hard_offset = np.stack(
            [
                np.asarray(limits.position_high_rad, f) - hard,
                -(np.asarray(limits.position_low_rad, f) + hard),
            ]
        )
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
    ) -> ReferenceBounds:
        # Hot path (every action): few, elementwise numpy calls and no reductions, since
        # each call costs about a microsecond on a 7-vector.
        # Row 0 looks toward the upper limit, row 1 toward the lower one, so each step
        # below is one numpy call for both sides.
        distance = self._limit_offset - self._sign * q
        stop = self.stopping_velocity(distance)
        velocity_bound = stop > self.v_max  # the velocity limit, not the position, binds
        toward = self._sign * v
        toward_or_rest = np.where(self._damped & ~(toward > 0), 0.0, toward)
        # Speed still allowed toward each limit, kept to at the fast gain (never reversing).
        room = (np.minimum(stop, self.v_max) - toward_or_rest * self.decay) * self.per_velocity
        # The hard (untightened) range: braking (faster than its stopping speed) at the
        # weak gain.
        hard_stop = self.stopping_velocity(self._hard_offset - self._sign * q)
        braking = hard_stop - toward < 0
        hard = np.where(
            braking,
            (hard_stop - toward * self.decay_weak) * self.per_velocity_weak,
            (hard_stop - toward_or_rest * self.decay) * self.per_velocity,
        )
        velocity_bound &= ~(hard < room)
        room = np.minimum(hard, room)  # numpy takes the second on ties, as the scalar code
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
        brake = np.minimum(np.maximum(u_gravity - v * (self.decay * self.per_velocity), lo), hi)
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
        return ReferenceBounds(
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
    ) -> list[np.ndarray]:
        """The poses one step ahead plus the braking distance: each joint's farthest
        continuation along its velocity, and, when some action pushes against its
        joint's velocity, the fast gain everywhere (the action may reverse it)."""
        push = u - u_gravity
        along = push * v >= 0
        decay = np.where(along, self.decay, self.decay_weak)
        step = np.where(along, self.step, self.step_weak)
        ends = [self._ahead(q, v * decay + push * step)]
        if not along.all():
            # Reversed at the fast gain; damped, from rest (see __init__).
            decay = np.where(along | ~self._damped, self.decay, 0.0)
            ends.append(self._ahead(q, v * decay + push * self.step))
        return ends

    def _ahead(self, q: np.ndarray, v_next: np.ndarray) -> np.ndarray:
        ahead: np.ndarray = q + v_next * self.dt + v_next * np.abs(v_next) / (2.0 * self.a_brake)
        return ahead


def _response(
    gain: np.ndarray, damping: np.ndarray, dt: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(decay, push per rad/s of change, rad/s per push) over one step of
    ``q̈ = G·(p − c·v)``: the exponential solution, or Euler's where c = 0 (exact there)."""
    decay = np.ones_like(gain)
    per_velocity = 1.0 / (gain * dt)
    step = gain * dt
    for i, (g, c) in enumerate(zip(gain.tolist(), damping.tolist(), strict=True)):
        rate = g * c * dt
        lost = -math.expm1(-rate)
        if rate >= sys.float_info.min:
            decay[i] = math.exp(-rate)
            per_velocity[i] = c / lost
            step[i] = lost / c
    return decay, per_velocity, step


def _float32_inward(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Round the interval inward to float32 values (the production rounding, rare path)."""
    lo32, hi32 = float32_inward(lo.tolist(), hi.tolist())
    return np.asarray(lo32), np.asarray(hi32)


def _meet(
    lo: np.ndarray, hi: np.ndarray, other_lo: np.ndarray, other_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Intersect [lo, hi] with [other_lo, other_hi]; where they do not overlap, the point
    of [lo, hi] nearest the other interval (the higher-priority interval wins)."""
    return (
        np.minimum(np.maximum(lo, other_lo), hi),
        np.maximum(np.minimum(hi, other_hi), lo),
    )


class ReferenceSupervisor(Supervisor):
    """``Supervisor`` as first written: elementwise numpy, every pose through the kinematics.

    Construction, ``filter`` and ``backup_action`` are the production ones; every step
    of the decision below is the reference's own.
    """

    def __init__(
        self,
        limits: SafetyLimits,
        *,
        kinematics: Kinematics | None = None,
        backup: Backup | None = None,
        config: SupervisorConfig | None = None,
    ) -> None:
        super().__init__(limits, kinematics=kinematics, backup=backup, config=config)
        self._envelope = ReferenceEnvelope(limits)  # type: ignore[assignment]
        self._scale = np.asarray(limits.action_scale_nm, dtype=np.float64)  # type: ignore[assignment]
        self._zeros = np.zeros(self._n, dtype=np.float64)  # type: ignore[assignment]
        self._last_gravity = self._zeros
        self._load = np.zeros(self._n, dtype=np.float64)  # type: ignore[assignment]

    def _run(
        self,
        observation: Any,
        proposed: Any,
        previous: Any,
        age_s: float | None,
        takeover: bool,
    ) -> tuple[np.ndarray, SafetyVerdict]:
        state = self._read_state(observation)
        if state is None:
            u_max = self._envelope.u_max
            out = np.minimum(np.maximum(self._last_gravity, -u_max), u_max).astype(np.float32)
            norm = float(np.linalg.norm(out))
            return out, SafetyVerdict(
                ActionSource.BACKUP,
                SafetyCheck.INVALID_OBSERVATION,
                norm,
                tuple(range(self._n)),
            )
        q, v = state
        checks = 0
        prev = _vector(previous, self._n)
        if previous is not None and prev is None:
            checks |= _INVALID_PREVIOUS
        self._learn_load(previous, v)
        u_g = self._gravity(q) + self._load
        self._last_gravity = u_g
        bounds = self._envelope.bounds(q, v, u_g, prev)

        u: np.ndarray | None = None
        if takeover:
            checks |= _TAKEOVER
        else:
            raw = _array(proposed)
            if raw is None or raw.shape != (self._n,):
                checks |= _INVALID_SHAPE
            elif not _finite(raw):
                checks |= _NON_FINITE
            else:
                u = np.minimum(np.maximum(raw, -_HUGE), _HUGE).astype(np.float32)
            if age_s is not None and not age_s <= self.limits.command_staleness_s:
                checks |= _STALE

        if checks & _REPLACING:
            candidate = self.backup.action(q, v, u_g)
            candidate = _place(np.nan_to_num(candidate, nan=0.0), bounds)
            damping = getattr(self.backup, "velocity_damping", 0.0)
            if damping:
                self._last_stop = (candidate.tobytes(), damping, self._slow(v))
        else:
            assert u is not None
            candidate, joint_checks = self._joint_stage(u, bounds, prev, u_g)
            checks |= joint_checks

        out, cartesian_checks = self._cartesian_stage(candidate, q, v, u_g, bounds)
        checks |= cartesian_checks
        return out, self._verdict(out, u, checks)

    def _learn_load(self, previous: Any, v: np.ndarray) -> None:
        """Update the unmodelled-load estimate when the robot ran this supervisor's stop.

        A stop that removes a fraction ``k`` of the velocity per step leaves a steady
        velocity ``v`` only if ``k·v·per_velocity`` of torque is missing, whatever the true
        gain; integrating that makes holds and predictions right under a payload the
        kinematics does not know. (Stable for any gain up to the bound when
        ``load_estimation_gain`` < 2.) Only joints nearly still when stopped learn.
        """
        last, self._last_stop = self._last_stop, None
        gain = self.config.load_estimation_gain
        if last is None or not gain or previous is None:
            return
        executed = _array(previous)
        if executed is None or executed.astype(np.float32).tobytes() != last[0]:
            return
        limit = self.config.load_estimate_limit
        learnt = np.clip(
            self._load - gain * last[1] * v * self._envelope.per_velocity, -limit, limit
        )
        self._load = np.where(last[2], learnt, self._load)

    def _slow(self, v: np.ndarray) -> list[bool]:
        fraction = self.config.load_learning_speed_fraction
        slow: list[bool] = (np.abs(v) <= fraction * self._envelope.v_max).tolist()
        return slow

    def _read_state(self, observation: Any) -> tuple[np.ndarray, np.ndarray] | None:
        obs = _array(observation)
        if obs is None or obs.ndim != 1 or obs.shape[0] < self._min_obs:
            return None
        if self._obs_dim and obs.shape[0] != self._obs_dim:
            return None
        q = obs[self._q]
        v = obs[self._v]
        if not (_finite(q) and _finite(v)):
            return None
        return q, v

    def _gravity(self, q: np.ndarray) -> np.ndarray:
        if self.kinematics is None:
            return self._zeros
        g = np.asarray(self.kinematics.gravity_torque(q), dtype=np.float64)
        if g.shape != (self._n,) or not _finite(g):
            # A broken model must not steer the arm; plain damping still works without it.
            return self._zeros
        return g / self._scale

    def _joint_stage(
        self, u32: np.ndarray, b: ReferenceBounds, prev: np.ndarray | None, u_g: np.ndarray
    ) -> tuple[np.ndarray, int]:
        values = u32.tolist()
        if all(map(operator.le, b.lo.tolist(), values)) and all(
            map(operator.le, values, b.hi.tolist())
        ):
            return u32, 0
        u = u32.astype(np.float64)
        checks = _fired(u, b)
        base = np.minimum(np.maximum(u_g if prev is None else prev, b.inner_lo), b.inner_hi)
        # Largest alpha with base + alpha (u - base) inside every joint's interval; only
        # joints outside their interval limit it (and there step != 0).
        step = u - base
        alpha_each = np.ones_like(u)
        np.divide(b.inner_hi - base, step, out=alpha_each, where=u > b.hi)
        np.divide(b.inner_lo - base, step, out=alpha_each, where=u < b.lo)
        alpha = min(alpha_each.tolist())
        out = base + alpha * step if alpha >= self.config.uniform_scale_floor else u
        return _place(out, b), checks

    def _cartesian_stage(
        self,
        u32: np.ndarray,
        q: np.ndarray,
        v: np.ndarray,
        u_g: np.ndarray,
        b: ReferenceBounds,
    ) -> tuple[np.ndarray, int]:
        if not self._cartesian:
            return u32, 0
        checks = self._path_checks(u32, q, v, u_g)
        if not checks:
            return u32, checks
        # Bisection between the brake and the action for the largest clear fraction.
        clear, breach = 0.0, 1.0
        for _ in range(self.config.sweep_backoff_steps):
            a = 0.5 * (clear + breach)
            trial = _place(b.brake + a * (u32.astype(np.float64) - b.brake), b)
            if self._path_checks(trial, q, v, u_g):
                breach = a
            else:
                clear = a
        if clear > 0.0:
            return _place(b.brake + clear * (u32.astype(np.float64) - b.brake), b), checks
        stop = _place(b.brake, b)
        self._last_stop = (stop.tobytes(), 1.0, self._slow(v))
        return stop, checks

    def _path_checks(self, u32: np.ndarray, q: np.ndarray, v: np.ndarray, u_g: np.ndarray) -> int:
        kin = self.kinematics
        assert kin is not None
        ends = self._envelope.predict(q, v, u32.astype(np.float64), u_g)
        cfg = self.config
        # Every pose on the straight paths to the predicted stops, through the kinematics.
        samples = [
            np.asarray(x)
            for end in ends
            for x in path_samples(
                q.tolist(), end.tolist(), self._reach, cfg.sweep_spacing_m, cfg.sweep_max_samples
            )
        ]
        checks = 0
        fast = chain_clearance(self.limits, kin)
        if fast is not None:
            # The closed form the optimized supervisor uses, at every pose.
            for bit, has, measure in (
                (_WORKSPACE, self._clearance.has_workspace, fast.workspace),
                (_OBSTACLE, self._clearance.has_obstacles, fast.obstacles),
            ):
                now = measure(q.tolist())
                if has and any(c < 0 and c <= now for c in (measure(x.tolist()) for x in samples)):
                    checks |= bit
            return checks
        if self._clearance.has_workspace:
            now = self._clearance.workspace(np.asarray(kin.end_effector(q)))
            path = [self._clearance.workspace(np.asarray(kin.end_effector(x))) for x in samples]
            if any(c < 0 and c <= now for c in path):
                checks |= _WORKSPACE
        if self._clearance.has_obstacles:
            now = self._clearance.obstacles(*_spheres(kin, q))
            path = [self._clearance.obstacles(*_spheres(kin, x)) for x in samples]
            if any(c < 0 and c <= now for c in path):
                checks |= _OBSTACLE
        return checks

    def _verdict(self, out: np.ndarray, proposed: np.ndarray | None, checks: int) -> SafetyVerdict:
        if checks & _REPLACING or proposed is None:
            norm = float(np.linalg.norm(out))
            return SafetyVerdict(
                ActionSource.BACKUP, SafetyCheck(checks), norm, tuple(range(self._n))
            )
        if out is proposed or out.tobytes() == proposed.tobytes():
            if not checks:
                return PASSED
            return SafetyVerdict(ActionSource.POLICY, SafetyCheck(checks), 0.0, ())
        diff = out.astype(np.float64) - proposed.astype(np.float64)
        joints = tuple(i for i, d in enumerate(diff.tolist()) if d)
        norm = math.sqrt(float(diff @ diff))
        return SafetyVerdict(ActionSource.CLIPPED, SafetyCheck(checks), norm, joints)


def _fired(u: np.ndarray, b: ReferenceBounds) -> int:
    """The checks whose own interval ``u`` violates on some joint."""
    low = u < b.motion_lo
    high = u > b.motion_hi
    checks = 0
    for bit, violated in (
        (_TORQUE, (u < b.torque_lo) | (u > b.torque_hi)),
        (_VELOCITY, (low & b.velocity_bound_lo) | (high & b.velocity_bound_hi)),
        (_POSITION, (low & ~b.velocity_bound_lo) | (high & ~b.velocity_bound_hi)),
        (_ACCELERATION, (u < b.accel_lo) | (u > b.accel_hi)),
        (_RATE, (u < b.rate_lo) | (u > b.rate_hi)),
    ):
        if any(violated.tolist()):
            checks |= bit
    return checks


def _finite(values: np.ndarray) -> bool:
    # A Python loop over a short vector beats np.all(np.isfinite(...)) several times over.
    return all(map(math.isfinite, values.ravel().tolist()))


def _place(u: np.ndarray, b: ReferenceBounds) -> np.ndarray:
    """``u`` moved into the inset final interval, as the float32 action to execute."""
    placed: np.ndarray = np.minimum(np.maximum(u, b.inner_lo), b.inner_hi).astype(np.float32)
    return placed


def _vector(value: Any, n: int) -> np.ndarray | None:
    arr = _array(value)
    if arr is None or arr.shape != (n,) or not _finite(arr):
        return None
    clipped: np.ndarray = np.minimum(np.maximum(arr, -1.0), 1.0)
    return clipped
