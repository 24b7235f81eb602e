"""The supervisor: the last thing between a policy's action and the motors.

``Supervisor.filter(observation, proposed_action, previous_action)`` returns the action
to execute and a :class:`SafetyVerdict`. In order:

1. validate the observation, the previous action and the proposal; anything unusable
   (wrong shape, NaN, ±Inf, stale) is replaced by the backup action and flagged;
2. compute per-joint intervals of safe torque (:mod:`tether.safety.envelope`); an action
   inside all of them passes bit-identical; otherwise the change from a safe baseline
   (the previous action, or gravity compensation) is scaled uniformly so the direction
   of the command is kept, falling back to per-joint projection when uniform scaling
   would shrink it below ``uniform_scale_floor``;
3. with kinematics, predict the arm one step plus its braking distance ahead; if the
   path to that pose breaches the workspace or an obstacle margin and is no better than
   the current pose, brake all joints (with ``sweep_backoff_steps``, first back the
   action off toward the brake to the largest fraction found clear by bisection; off by
   default, see its field). Motion that increases clearance stays allowed. The kinematics is skipped while a
   reach bound (:mod:`tether.safety.reach`) proves the predicted pose clear of the last
   pose evaluated exactly, and evaluated in closed form where it offers one
   (:mod:`tether.safety.chain`).

The hot path is plain float arithmetic (numpy costs about a microsecond per call on
these small vectors); ``tests/safety/reference.py`` keeps the elementwise numpy version
as the oracle that every decision must match bit for bit.

Invariants: ``filter`` never raises on its inputs and never returns a non-finite action;
the returned action lies in every interval; filtering the returned action again returns
it unchanged (for the same state of the supervisor). That state belongs to one robot,
so use one supervisor per robot: the gravity hold at the last readable pose (for an
unreadable observation) and an estimate of the load the kinematics does not model,
learnt from the velocity left under the supervisor's own stops and added to gravity
compensation everywhere.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tether.safety.backups import Backup, BackupConfig, make_backup
from tether.safety.chain import chain_clearance
from tether.safety.envelope import JointBounds, JointEnvelope, maximum, minimum
from tether.safety.geometry import Clearance
from tether.safety.kinematics import Kinematics
from tether.safety.limits import SafetyLimits
from tether.safety.reach import SLACK_M, ClearanceAnchor, joint_reach
from tether.safety.sweep import path_count, path_pose
from tether.safety.verdict import (
    ACCELERATION_BIT as _ACCELERATION,
    CLIP_BEFORE_CAST as _HUGE,
    INVALID_PREVIOUS_BIT as _INVALID_PREVIOUS,
    INVALID_SHAPE_BIT as _INVALID_SHAPE,
    NON_FINITE_BIT as _NON_FINITE,
    OBSTACLE_BIT as _OBSTACLE,
    PASSED,
    POSITION_BIT as _POSITION,
    RATE_BIT as _RATE,
    REPLACING_BITS as _REPLACING,
    STALE_BIT as _STALE,
    TAKEOVER_BIT as _TAKEOVER,
    TORQUE_BIT as _TORQUE,
    VELOCITY_BIT as _VELOCITY,
    WORKSPACE_BIT as _WORKSPACE,
    ActionSource,
    SafetyCheck,
    SafetyVerdict,
)

# Check bits as plain ints on the hot path: IntFlag arithmetic costs a microsecond per
# operation, more than the numpy work of a whole check.


class SupervisorConfig(BaseModel):
    """How the supervisor corrects actions and which backup it uses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backup: BackupConfig = Field(
        default_factory=lambda: BackupConfig(), description="Backup action for unusable inputs (-)"
    )
    load_estimation_gain: float = Field(
        default=0.5,
        ge=0.0,
        lt=2.0,
        description="Gain of the unmodelled-load estimate learnt while the supervisor holds "
        "or stops the robot; 0 disables it, stable below 2 (1)",
    )
    load_estimate_limit: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="Largest unmodelled load the estimate may assume, per joint (normalized torque)",
    )
    uniform_scale_floor: float = Field(
        default=0.25,
        ge=0.0,
        le=1.0,
        description="Smallest uniform scale of a correction before joints are clipped one by one (1)",
    )
    # 1: every stop of a joint within its velocity limit teaches. Learning only from
    # nearly-still stops (0.25) kept a bogus load out of the estimate but learnt a real
    # payload too late: a fresh supervisor on the drifted arm let the sampled shipped
    # policy rest against the obstacle (182 contact steps in one episode;
    # tests/safety/test_pretrained_policy.py). A wrong load costs corrections; a
    # missing one costs contacts.
    load_learning_speed_fraction: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="Fastest a joint may move, as a fraction of its velocity limit, when "
        "the supervisor stops it for that stop to teach the unmodelled-load estimate (1)",
    )
    # Off by default: an action backed off to the edge of its predicted clear path leaves
    # none of the slack the full brake has for what the one-step model does not know
    # (tests/safety/test_pretrained_policy.py runs the shipped policy with it off).
    sweep_backoff_steps: int = Field(
        default=0,
        ge=0,
        le=16,
        description="Bisection steps between the brake and an action whose predicted path "
        "breaches the workspace or an obstacle margin, keeping the largest fraction found "
        "clear so an arm near an obstacle slows instead of freezing; UNSAFE on the drifted "
        "built-in arm (obstacle contacts), so 0, which brakes at once, is the default (steps)",
    )
    sweep_spacing_m: float = Field(
        default=0.01,
        gt=0.0,
        description="Largest Cartesian distance between the poses checked along the path to "
        "the predicted stop; keep it below twice the obstacle margin (m)",
    )
    sweep_max_samples: int = Field(
        default=256,
        ge=1,
        description="Most poses checked along one predicted path; a longer path is sampled "
        "more sparsely (poses)",
    )


class Supervisor:
    """Filters actions against :class:`SafetyLimits`; see the module docstring."""

    def __init__(
        self,
        limits: SafetyLimits,
        *,
        kinematics: Kinematics | None = None,
        backup: Backup | None = None,
        config: SupervisorConfig | None = None,
    ) -> None:
        self.limits = limits
        self.config = config or SupervisorConfig()
        self.kinematics = kinematics
        self._custom_backup = backup
        self.backup: Backup = backup or make_backup(limits, self.config.backup)
        self._envelope = JointEnvelope(limits)
        self._clearance = Clearance(limits)
        self._cartesian = kinematics is not None and (
            self._clearance.has_obstacles or self._clearance.has_workspace
        )
        # Per check, the last pose evaluated exactly and how far each joint's rotation
        # can move the arm: while the predicted pose stays closer to it than its
        # clearance allows, that margin cannot be breached and its forward kinematics is
        # skipped (tether.safety.reach). None: every pose is evaluated.
        reach = joint_reach(kinematics) if self._cartesian and kinematics else None
        self._reach = reach
        self._workspace_anchor = None if reach is None else ClearanceAnchor(reach)
        self._obstacle_anchor = None if reach is None else ClearanceAnchor(reach)
        # Clearances in closed form where the kinematics offers it (tether.safety.chain):
        # the swept check's poses cost a few µs each instead of a kinematics call.
        self._chain = chain_clearance(limits, kinematics) if self._cartesian else None
        self._n = limits.n_joints
        self._all_joints = tuple(range(self._n))
        self._q = slice(*limits.layout.joint_position)
        self._v = slice(*limits.layout.joint_velocity)
        self._min_obs = limits.min_obs_dim
        self._obs_dim = limits.observation_dim
        self._scale = [float(x) for x in limits.action_scale_nm]
        self._zeros = [0.0] * self._n
        # Gravity compensation where the robot was last seen: an unreadable observation
        # holds there rather than letting the arm drop.
        self._last_gravity = self._zeros
        # Unmodelled load (payload, weak actuators) per joint, in normalized torque, and
        # the stop this supervisor last returned with the velocity damping it applied.
        self._load = [0.0] * self._n
        self._last_stop: tuple[bytes, float, list[bool]] | None = None
        self._learn_speed = [
            self.config.load_learning_speed_fraction * x for x in self._envelope.v_max
        ]

    def fresh(self) -> Supervisor:
        """A supervisor of another robot under the same limits, with no robot state."""
        return self.with_limits(self.limits)

    def with_limits(self, limits: SafetyLimits) -> Supervisor:
        """The same supervisor (kinematics, backup, config) enforcing other limits, with
        fresh robot state; pass the robot's state across with :meth:`take_state`."""
        return Supervisor(
            limits, kinematics=self.kinematics, backup=self._custom_backup, config=self.config
        )

    @property
    def load_estimate(self) -> tuple[float, ...]:
        """The unmodelled load learnt so far, per joint (normalized torque)."""
        return tuple(self._load)

    def take_state(self, other: Supervisor) -> None:
        """Continue the robot ``other`` has been supervising: its learnt load, the hold
        at its last readable pose and the stop it last returned.

        For one robot supervised under several limits (a degradation level, a canary's
        tightened steps): a supervisor switched in fresh knows no payload, and a fresh
        supervisor on the drifted arm let it rest against the obstacle
        (tests/safety/test_pretrained_policy.py).
        """
        if other is self:
            return
        self._load = list(other._load)
        self._last_gravity = other._last_gravity
        self._last_stop = other._last_stop

    def filter(
        self,
        observation: Any,
        proposed_action: Any,
        previous_action: Any | None = None,
        *,
        observation_age_s: float | None = None,
    ) -> tuple[np.ndarray, SafetyVerdict]:
        """The action to execute (float32, shape (n,)) and what was done to it."""
        return self._run(observation, proposed_action, previous_action, observation_age_s, False)

    def backup_action(
        self, observation: Any, previous_action: Any | None = None
    ) -> tuple[np.ndarray, SafetyVerdict]:
        """The backup action for this state (TAKEOVER, or a client-side watchdog miss)."""
        return self._run(observation, None, previous_action, None, True)

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
            held = [
                minimum(maximum(g, -m), m) for g, m in zip(self._last_gravity, u_max, strict=True)
            ]
            out = np.array(held, dtype=np.float32)
            norm = float(np.linalg.norm(out))
            return out, SafetyVerdict(
                ActionSource.BACKUP,
                SafetyCheck.INVALID_OBSERVATION,
                norm,
                self._all_joints,
            )
        q_arr, q, v = state
        checks = 0
        prev = _vector(previous, self._n)
        if previous is not None and prev is None:
            checks |= _INVALID_PREVIOUS
        self._learn_load(previous, v)
        u_g = [g + load for g, load in zip(self._gravity(q_arr), self._load, strict=True)]
        self._last_gravity = u_g
        bounds = self._envelope.bounds(q, v, u_g, prev)

        u: np.ndarray | None = None
        if takeover:
            checks |= _TAKEOVER
        else:
            values = _floats(proposed, self._n)
            if values is None:
                checks |= _INVALID_SHAPE
            elif not all(map(math.isfinite, values)):
                checks |= _NON_FINITE
            else:
                u = np.array([minimum(maximum(x, -_HUGE), _HUGE) for x in values], dtype=np.float32)
            if age_s is not None and not age_s <= self.limits.command_staleness_s:
                checks |= _STALE

        if checks & _REPLACING:
            backup = self.backup.action(q_arr, np.array(v), np.array(u_g))
            values = _floats(backup, self._n)
            if values is None:
                values = np.nan_to_num(backup, nan=0.0).tolist()
            # NaN holds at zero; ±inf lands on the interval's end, as ±max float would
            # (numpy.nan_to_num costs several microseconds on a 7-vector).
            candidate = _place([x if x == x else 0.0 for x in values], bounds)
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

    def _learn_load(self, previous: Any, v: list[float]) -> None:
        """Update the unmodelled-load estimate when the robot ran this supervisor's stop.

        A stop that removes a fraction ``k`` of the velocity per step leaves a steady
        velocity ``v`` only if ``k·v·per_velocity`` of torque is missing, whatever the true
        gain; integrating that makes holds and predictions right under a payload the
        kinematics does not know. (Stable for any gain up to the bound when
        ``load_estimation_gain`` < 2.) Only joints no faster than
        ``load_learning_speed_fraction`` of their velocity limit when stopped learn (by
        default every joint within its limit; see that field for why not fewer).
        """
        last, self._last_stop = self._last_stop, None
        gain = self.config.load_estimation_gain
        if last is None or not gain or previous is None:
            return
        executed = _array(previous)
        if executed is None:
            return
        # A value beyond float32's range becomes inf, which no stop equals; not a warning.
        with np.errstate(over="ignore"):
            if executed.astype(np.float32).tobytes() != last[0]:
                return
        limit = self.config.load_estimate_limit
        step = gain * last[1]
        self._load = [
            minimum(maximum(load - step * vi * pv, -limit), limit) if slow else load
            for load, vi, pv, slow in zip(
                self._load, v, self._envelope.per_velocity, last[2], strict=True
            )
        ]

    def _slow(self, v: list[float]) -> list[bool]:
        """Joints slow enough for a stop from ``v`` to teach the load estimate."""
        return [-s <= x <= s for x, s in zip(v, self._learn_speed, strict=True)]

    def _read_state(self, observation: Any) -> tuple[np.ndarray, list[float], list[float]] | None:
        """(q as an array for the kinematics, q, v) or None when unreadable."""
        obs = _array(observation)
        if obs is None or obs.ndim != 1 or obs.shape[0] < self._min_obs:
            return None
        if self._obs_dim and obs.shape[0] != self._obs_dim:
            return None
        q_arr = obs[self._q]
        q = q_arr.tolist()
        v = obs[self._v].tolist()
        if not (all(map(math.isfinite, q)) and all(map(math.isfinite, v))):
            return None
        return q_arr, q, v

    def _gravity(self, q: np.ndarray) -> list[float]:
        if self.kinematics is None:
            return self._zeros
        values = _floats(self.kinematics.gravity_torque(q), self._n)
        if values is None or not all(map(math.isfinite, values)):
            # A broken model must not steer the arm; plain damping still works without it.
            return self._zeros
        return [x / s for x, s in zip(values, self._scale, strict=True)]

    def _joint_stage(
        self, u32: np.ndarray, b: JointBounds, prev: list[float] | None, u_g: list[float]
    ) -> tuple[np.ndarray, int]:
        u = u32.tolist()
        lo, hi = b.lo, b.hi
        if all(map(operator.le, lo, u)) and all(map(operator.le, u, hi)):
            return u32, 0
        checks = _fired(u, b)
        inner_lo, inner_hi = b.inner_lo, b.inner_hi
        start = u_g if prev is None else prev
        # Largest alpha with base + alpha (u - base) inside every joint's interval, where
        # base is the start moved into the interval; only joints outside their interval
        # limit it (and there step != 0). One loop: each list costs a comprehension.
        base: list[float] = []
        step: list[float] = []
        alpha = 1.0
        for i, x in enumerate(u):
            y = start[i]
            low = inner_lo[i]
            high = inner_hi[i]
            y = y if y > low else low
            y = y if y < high else high
            d = x - y
            base.append(y)
            step.append(d)
            if x > hi[i]:
                a = (high - y) / d
                if a < alpha:
                    alpha = a
            elif x < lo[i]:
                a = (low - y) / d
                if a < alpha:
                    alpha = a
        if alpha >= self.config.uniform_scale_floor:
            u = [y + alpha * d for y, d in zip(base, step, strict=True)]
        return _place(u, b), checks

    def _cartesian_stage(
        self,
        u32: np.ndarray,
        q: list[float],
        v: list[float],
        u_g: list[float],
        b: JointBounds,
    ) -> tuple[np.ndarray, int]:
        if not self._cartesian:
            return u32, 0
        checks = self._path_checks(u32, q, v, u_g)
        if not checks:
            return u32, checks
        # A kept action's paths are as clear as a passed one's. Only the full brake is a
        # stop the unmodelled-load estimate may learn from.
        if self.config.sweep_backoff_steps:
            kept = self._backed_off(u32, q, v, u_g, b)
            if kept is not None:
                return kept, checks
        stop = _place(b.brake, b)
        self._last_stop = (stop.tobytes(), 1.0, self._slow(v))
        return stop, checks

    def _backed_off(
        self, u32: np.ndarray, q: list[float], v: list[float], u_g: list[float], b: JointBounds
    ) -> np.ndarray | None:
        """The largest fraction of the way from the brake to ``u32`` whose predicted paths
        are clear, by ``sweep_backoff_steps`` bisections; None when none was found."""
        brake = b.brake
        u = u32.tolist()
        clear, breach = 0.0, 1.0
        kept: np.ndarray | None = None
        for _ in range(self.config.sweep_backoff_steps):
            a = 0.5 * (clear + breach)
            trial = _place([x + a * (y - x) for x, y in zip(brake, u, strict=True)], b)
            if self._path_checks(trial, q, v, u_g):
                breach = a
            else:
                clear = a
                kept = trial
        return kept

    def _path_checks(
        self, u32: np.ndarray, q: list[float], v: list[float], u_g: list[float]
    ) -> int:
        """The Cartesian checks the predicted paths under action ``u32`` breach."""
        predicted, reversed_ = self._envelope.predict(q, v, u32.tolist(), u_g)
        ends = [predicted] if reversed_ is None else [predicted, reversed_]
        clearance = self._clearance
        ws_anchor, obstacle_anchor = self._workspace_anchor, self._obstacle_anchor
        # The reach bound is convex along a straight path, so proving both ends of every
        # path clear proves every pose on them clear.
        workspace = clearance.has_workspace and not (
            ws_anchor is not None and ws_anchor.proves_clear(q) and ws_anchor.proves_all(ends)
        )
        obstacles = clearance.has_obstacles and not (
            obstacle_anchor is not None
            and obstacle_anchor.proves_clear(q)
            and obstacle_anchor.proves_all(ends)
        )
        if not (workspace or obstacles):
            return 0
        checks = 0
        if workspace and self._paths_breach(ends, q, self._workspace_clearance, ws_anchor):
            checks |= _WORKSPACE
        if obstacles and self._paths_breach(ends, q, self._obstacle_clearance, obstacle_anchor):
            checks |= _OBSTACLE
        return checks

    def _workspace_clearance(self, q: Sequence[float]) -> float:
        if self._chain is not None:
            return self._chain.workspace(q)
        kin = self.kinematics
        assert kin is not None
        return self._clearance.workspace(np.asarray(kin.end_effector(np.array(q))))

    def _obstacle_clearance(self, q: Sequence[float]) -> float:
        if self._chain is not None:
            return self._chain.obstacles(q)
        kin = self.kinematics
        assert kin is not None
        return self._clearance.obstacles(*_spheres(kin, np.array(q)))

    def _paths_breach(
        self,
        ends: list[list[float]],
        q: list[float],
        measure: Callable[[Sequence[float]], float],
        anchor: ClearanceAnchor | None,
    ) -> bool:
        """Whether some sample on a path to ``ends`` breaches the margin and is no better
        than now (``tether.safety.sweep``).

        Motion that increases clearance stays allowed, so an arm inside a margin can
        leave it. Samples are evenly spaced along a straight path, so the reach bound
        between sample ``m`` and sample ``k`` is ``(k − m)·length/count``: every sample
        that bound proves clear of the last one evaluated cannot breach and is jumped
        over without being built. The last pose evaluated becomes the anchor.
        """
        cfg = self.config
        reach = self._reach
        now: float | None = None
        last: list[float] | None = None
        last_clearance = 0.0
        breached = False
        for end in ends:
            count, length = path_count(q, end, reach, cfg.sweep_spacing_m, cfg.sweep_max_samples)
            step = length / count
            k = 1
            while k <= count:
                x = path_pose(q, end, k, count)
                ahead = measure(x)
                last, last_clearance = x, ahead
                if ahead < 0:
                    if now is None:
                        now = measure(q)
                    if ahead <= now:
                        breached = True
                        break
                k += 1
                if reach is not None and step > 0.0 and ahead > SLACK_M:
                    # Samples k' with (k' - k_evaluated)·step + SLACK < clearance are clear.
                    k += max(0, math.ceil((ahead - SLACK_M) / step) - 1)
            if breached:
                break
        if anchor is not None and last is not None:
            anchor.update(last, last_clearance)
        return breached

    def _verdict(self, out: np.ndarray, proposed: np.ndarray | None, checks: int) -> SafetyVerdict:
        if checks & _REPLACING or proposed is None:
            norm = float(np.linalg.norm(out))
            return SafetyVerdict(ActionSource.BACKUP, _flags(checks), norm, self._all_joints)
        if out is proposed or out.tobytes() == proposed.tobytes():
            if not checks:
                return PASSED
            return SafetyVerdict(ActionSource.POLICY, _flags(checks), 0.0, ())
        diff = [x - y for x, y in zip(out.tolist(), proposed.tolist(), strict=True)]
        joints = tuple([i for i, d in enumerate(diff) if d])
        # numpy's dot, not a Python sum: the summation order is part of the figure.
        d = np.array(diff)
        norm = math.sqrt(float(d @ d))
        return SafetyVerdict(ActionSource.CLIPPED, _flags(checks), norm, joints)


_FLAGS: dict[int, SafetyCheck] = {}


def _flags(checks: int) -> SafetyCheck:
    """``SafetyCheck(checks)``, memoized: building an IntFlag costs more than a lookup."""
    flag = _FLAGS.get(checks)
    if flag is None:
        flag = _FLAGS[checks] = SafetyCheck(checks)
    return flag


def _fired(u: list[float], b: JointBounds) -> int:
    """The checks whose own interval ``u`` violates on some joint."""
    checks = 0
    for x, t_lo, t_hi, m_lo, m_hi, v_lo, v_hi, a_lo, a_hi, r_lo, r_hi in zip(
        u,
        b.torque_lo,
        b.torque_hi,
        b.motion_lo,
        b.motion_hi,
        b.velocity_bound_lo,
        b.velocity_bound_hi,
        b.accel_lo,
        b.accel_hi,
        b.rate_lo,
        b.rate_hi,
        strict=True,
    ):
        if x < t_lo or x > t_hi:
            checks |= _TORQUE
        if x < m_lo:
            checks |= _VELOCITY if v_lo else _POSITION
        if x > m_hi:
            checks |= _VELOCITY if v_hi else _POSITION
        if x < a_lo or x > a_hi:
            checks |= _ACCELERATION
        if x < r_lo or x > r_hi:
            checks |= _RATE
    return checks


def _place(u: list[float], b: JointBounds) -> np.ndarray:
    """``u`` moved into the inset final interval, as the float32 action to execute."""
    lo, hi = b.inner_lo, b.inner_hi
    return np.array([minimum(maximum(x, lo[i]), hi[i]) for i, x in enumerate(u)], dtype=np.float32)


def _array(value: Any) -> np.ndarray | None:
    """``value`` as a float64 array, or None when it is not numeric."""
    if value is None:
        return None
    try:
        arr: np.ndarray = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return None
    return arr


def _floats(value: Any, n: int) -> list[float] | None:
    """``value`` as n Python floats (float64 values), or None when it is not numeric or
    not of shape (n,)."""
    if isinstance(value, np.ndarray) and value.dtype.char in "fd":
        # The common case, without the float64 copy: float32 widens exactly.
        return value.tolist() if value.shape == (n,) else None
    arr = _array(value)
    if arr is None or arr.shape != (n,):
        return None
    values: list[float] = arr.tolist()
    return values


def _vector(value: Any, n: int) -> list[float] | None:
    """A usable previous action clipped to [-1, 1], or None."""
    values = _floats(value, n)
    if values is None or not all(map(math.isfinite, values)):
        return None
    return [minimum(maximum(x, -1.0), 1.0) for x in values]


def _spheres(kin: Kinematics, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    centers, radii = kin.collision_spheres(q)
    return np.asarray(centers, dtype=np.float64), np.asarray(radii, dtype=np.float64)
