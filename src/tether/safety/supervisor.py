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
3. with kinematics, predict the arm one step plus its braking distance ahead; if that
   pose breaches the workspace or an obstacle margin and is no better than the current
   pose, brake all joints instead. Motion that increases clearance stays allowed.

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
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tether.safety.backups import Backup, BackupConfig, make_backup
from tether.safety.envelope import JointBounds, JointEnvelope
from tether.safety.geometry import Clearance
from tether.safety.kinematics import Kinematics
from tether.safety.limits import SafetyLimits
from tether.safety.verdict import (
    PASSED,
    REPLACING_CHECKS,
    ActionSource,
    SafetyCheck,
    SafetyVerdict,
)

# Check bits as plain ints on the hot path: IntFlag arithmetic costs a microsecond per
# operation, more than the numpy work of a whole check.
_INVALID_OBSERVATION = int(SafetyCheck.INVALID_OBSERVATION)
_INVALID_PREVIOUS = int(SafetyCheck.INVALID_PREVIOUS)
_TAKEOVER = int(SafetyCheck.TAKEOVER)
_INVALID_SHAPE = int(SafetyCheck.INVALID_SHAPE)
_NON_FINITE = int(SafetyCheck.NON_FINITE)
_STALE = int(SafetyCheck.STALE)
_WORKSPACE = int(SafetyCheck.WORKSPACE)
_OBSTACLE = int(SafetyCheck.OBSTACLE)
_TORQUE = int(SafetyCheck.TORQUE)
_VELOCITY = int(SafetyCheck.VELOCITY)
_POSITION = int(SafetyCheck.POSITION)
_ACCELERATION = int(SafetyCheck.ACCELERATION)
_RATE = int(SafetyCheck.RATE)
_REPLACING = int(REPLACING_CHECKS)

# Finite proposals are clipped to this before the float32 cast, so 1e300 stays finite;
# anything beyond [-1, 1] is corrected anyway.
_HUGE = 1e6


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
        self._n = limits.n_joints
        self._q = slice(*limits.layout.joint_position)
        self._v = slice(*limits.layout.joint_velocity)
        self._min_obs = limits.min_obs_dim
        self._obs_dim = limits.observation_dim
        self._scale = np.asarray(limits.action_scale_nm, dtype=np.float64)
        self._zeros = np.zeros(self._n, dtype=np.float64)
        # Gravity compensation where the robot was last seen: an unreadable observation
        # holds there rather than letting the arm drop.
        self._last_gravity = self._zeros
        # Unmodelled load (payload, weak actuators) per joint, in normalized torque, and
        # the stop this supervisor last returned with the velocity damping it applied.
        self._load = np.zeros(self._n, dtype=np.float64)
        self._last_stop: tuple[bytes, float] | None = None

    def with_limits(self, limits: SafetyLimits) -> Supervisor:
        """The same supervisor (kinematics, backup, config) enforcing other limits."""
        return Supervisor(
            limits, kinematics=self.kinematics, backup=self._custom_backup, config=self.config
        )

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
                self._last_stop = (candidate.tobytes(), damping)
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
        ``load_estimation_gain`` < 2.)
        """
        last, self._last_stop = self._last_stop, None
        gain = self.config.load_estimation_gain
        if last is None or not gain or previous is None:
            return
        executed = _array(previous)
        if executed is None or executed.astype(np.float32).tobytes() != last[0]:
            return
        self._load -= gain * last[1] * v * self._envelope.per_velocity
        limit = self.config.load_estimate_limit
        np.clip(self._load, -limit, limit, out=self._load)

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
        self, u32: np.ndarray, b: JointBounds, prev: np.ndarray | None, u_g: np.ndarray
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
        b: JointBounds,
    ) -> tuple[np.ndarray, int]:
        if not self._cartesian:
            return u32, 0
        kin = self.kinematics
        assert kin is not None
        q_ahead = self._envelope.predict(q, v, u32.astype(np.float64), u_g)
        checks = 0
        if self._clearance.has_workspace:
            ahead = self._clearance.workspace(np.asarray(kin.end_effector(q_ahead)))
            if ahead < 0 and ahead <= self._clearance.workspace(np.asarray(kin.end_effector(q))):
                checks |= _WORKSPACE
        if self._clearance.has_obstacles:
            ahead = self._clearance.obstacles(*_spheres(kin, q_ahead))
            if ahead < 0 and ahead <= self._clearance.obstacles(*_spheres(kin, q)):
                checks |= _OBSTACLE
        if not checks:
            return u32, checks
        stop = _place(b.brake, b)
        self._last_stop = (stop.tobytes(), 1.0)
        return stop, checks

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


def _fired(u: np.ndarray, b: JointBounds) -> int:
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


def _place(u: np.ndarray, b: JointBounds) -> np.ndarray:
    """``u`` moved into the inset final interval, as the float32 action to execute."""
    placed: np.ndarray = np.minimum(np.maximum(u, b.inner_lo), b.inner_hi).astype(np.float32)
    return placed


def _array(value: Any) -> np.ndarray | None:
    """``value`` as a float64 array, or None when it is not numeric."""
    if value is None:
        return None
    try:
        arr: np.ndarray = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return None
    return arr


def _vector(value: Any, n: int) -> np.ndarray | None:
    arr = _array(value)
    if arr is None or arr.shape != (n,) or not _finite(arr):
        return None
    clipped: np.ndarray = np.minimum(np.maximum(arr, -1.0), 1.0)
    return clipped


def _spheres(kin: Kinematics, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    centers, radii = kin.collision_spheres(q)
    return np.asarray(centers, dtype=np.float64), np.asarray(radii, dtype=np.float64)
