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
it unchanged.
"""

from __future__ import annotations

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

# Finite proposals are clipped to this before the float32 cast, so 1e300 stays finite;
# anything beyond [-1, 1] is corrected anyway.
_HUGE = 1e6


class SupervisorConfig(BaseModel):
    """How the supervisor corrects actions and which backup it uses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backup: BackupConfig = Field(
        default_factory=lambda: BackupConfig(), description="Backup action for unusable inputs (-)"
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
        self._scale = np.asarray(limits.action_scale_nm, dtype=np.float64)
        self._zeros = np.zeros(self._n, dtype=np.float64)
        # Where the robot was last seen: an unreadable observation holds there.
        self._last_hold = np.zeros(self._n, dtype=np.float32)

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
            out = self._last_hold.copy()
            norm = float(np.linalg.norm(out))
            return out, SafetyVerdict(
                ActionSource.BACKUP, SafetyCheck.INVALID_OBSERVATION, norm, tuple(range(self._n))
            )
        q, v = state
        checks = SafetyCheck.NONE
        prev = _vector(previous, self._n)
        if previous is not None and prev is None:
            checks |= SafetyCheck.INVALID_PREVIOUS
        u_g = self._gravity(q)
        self._last_hold = np.clip(u_g, -1.0, 1.0).astype(np.float32)
        bounds = self._envelope.bounds(q, v, u_g, prev)

        u: np.ndarray | None = None
        if takeover:
            checks |= SafetyCheck.TAKEOVER
        else:
            raw = _array(proposed)
            if raw is None or raw.shape != (self._n,):
                checks |= SafetyCheck.INVALID_SHAPE
            elif not np.all(np.isfinite(raw)):
                checks |= SafetyCheck.NON_FINITE
            else:
                u = np.clip(raw, -_HUGE, _HUGE).astype(np.float32)
            if age_s is not None and not age_s <= self.limits.command_staleness_s:
                checks |= SafetyCheck.STALE

        if checks & REPLACING_CHECKS:
            candidate = self.backup.action(q, v, u_g)
            candidate = np.clip(
                np.nan_to_num(candidate, nan=0.0), bounds.inner_lo, bounds.inner_hi
            ).astype(np.float32)
        else:
            assert u is not None
            candidate, joint_checks = self._joint_stage(u, bounds, prev, u_g)
            checks |= joint_checks

        out, cartesian_checks = self._cartesian_stage(candidate, q, v, u_g, bounds)
        checks |= cartesian_checks
        return out, self._verdict(out, u, checks)

    def _read_state(self, observation: Any) -> tuple[np.ndarray, np.ndarray] | None:
        obs = _array(observation)
        if obs is None or obs.ndim != 1 or obs.shape[0] < self._min_obs:
            return None
        q = obs[self._q]
        v = obs[self._v]
        if not (np.all(np.isfinite(q)) and np.all(np.isfinite(v))):
            return None
        return q, v

    def _gravity(self, q: np.ndarray) -> np.ndarray:
        if self.kinematics is None:
            return self._zeros
        g = np.asarray(self.kinematics.gravity_torque(q), dtype=np.float64)
        if g.shape != (self._n,) or not np.all(np.isfinite(g)):
            # A broken model must not steer the arm; plain damping still works without it.
            return self._zeros
        return g / self._scale

    def _joint_stage(
        self, u32: np.ndarray, b: JointBounds, prev: np.ndarray | None, u_g: np.ndarray
    ) -> tuple[np.ndarray, SafetyCheck]:
        u = u32.astype(np.float64)
        below = u < b.lo
        above = u > b.hi
        if not (np.any(below) or np.any(above)):
            return u32, SafetyCheck.NONE
        checks = _fired(u, b)
        base = np.clip(u_g if prev is None else prev, b.inner_lo, b.inner_hi)
        # Largest alpha with base + alpha (u - base) inside every joint's interval.
        step = u - base
        with np.errstate(divide="ignore", invalid="ignore"):
            alpha_hi = np.where(above, (b.inner_hi - base) / step, 1.0)
            alpha_lo = np.where(below, (b.inner_lo - base) / step, 1.0)
        alpha = float(np.min(np.minimum(alpha_hi, alpha_lo)))
        out = base + alpha * step if alpha >= self.config.uniform_scale_floor else u
        return np.clip(out, b.inner_lo, b.inner_hi).astype(np.float32), checks

    def _cartesian_stage(
        self,
        u32: np.ndarray,
        q: np.ndarray,
        v: np.ndarray,
        u_g: np.ndarray,
        b: JointBounds,
    ) -> tuple[np.ndarray, SafetyCheck]:
        if not self._cartesian:
            return u32, SafetyCheck.NONE
        kin = self.kinematics
        assert kin is not None
        q_ahead = self._envelope.predict(q, v, u32.astype(np.float64), u_g)
        checks = SafetyCheck.NONE
        if self._clearance.has_workspace:
            ahead = self._clearance.workspace(np.asarray(kin.end_effector(q_ahead)))
            if ahead < 0 and ahead <= self._clearance.workspace(np.asarray(kin.end_effector(q))):
                checks |= SafetyCheck.WORKSPACE
        if self._clearance.has_obstacles:
            ahead = self._clearance.obstacles(*_spheres(kin, q_ahead))
            if ahead < 0 and ahead <= self._clearance.obstacles(*_spheres(kin, q)):
                checks |= SafetyCheck.OBSTACLE
        if not checks:
            return u32, checks
        brake = u_g - v * self._envelope.per_velocity
        return np.clip(brake, b.inner_lo, b.inner_hi).astype(np.float32), checks

    def _verdict(
        self, out: np.ndarray, proposed: np.ndarray | None, checks: SafetyCheck
    ) -> SafetyVerdict:
        if checks & REPLACING_CHECKS or proposed is None:
            norm = float(np.linalg.norm(out))
            return SafetyVerdict(ActionSource.BACKUP, checks, norm, tuple(range(self._n)))
        changed = out != proposed
        if not np.any(changed):
            return PASSED if not checks else SafetyVerdict(ActionSource.POLICY, checks, 0.0, ())
        diff = out.astype(np.float64) - proposed.astype(np.float64)
        joints = tuple(int(i) for i in np.flatnonzero(changed))
        return SafetyVerdict(ActionSource.CLIPPED, checks, float(np.linalg.norm(diff)), joints)


def _fired(u: np.ndarray, b: JointBounds) -> SafetyCheck:
    """The checks whose own interval ``u`` violates on some joint."""
    checks = SafetyCheck.NONE
    if np.any((u < b.torque_lo) | (u > b.torque_hi)):
        checks |= SafetyCheck.TORQUE
    low = u < b.motion_lo
    high = u > b.motion_hi
    if np.any(low & b.velocity_bound_lo) or np.any(high & b.velocity_bound_hi):
        checks |= SafetyCheck.VELOCITY
    if np.any(low & ~b.velocity_bound_lo) or np.any(high & ~b.velocity_bound_hi):
        checks |= SafetyCheck.POSITION
    if np.any((u < b.accel_lo) | (u > b.accel_hi)):
        checks |= SafetyCheck.ACCELERATION
    if np.any((u < b.rate_lo) | (u > b.rate_hi)):
        checks |= SafetyCheck.RATE
    return checks


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
    if arr is None or arr.shape != (n,) or not np.all(np.isfinite(arr)):
        return None
    clipped: np.ndarray = np.clip(arr, -1.0, 1.0)
    return clipped


def _spheres(kin: Kinematics, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    centers, radii = kin.collision_spheres(q)
    return np.asarray(centers, dtype=np.float64), np.asarray(radii, dtype=np.float64)
