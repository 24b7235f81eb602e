"""Backup actions: what the robot does when the policy's action cannot be used.

A backup is a small object with ``action(q, v, u_gravity) -> u`` returning normalized
torques; the supervisor always passes its output through the same torque, motion,
acceleration and rate intervals as a policy action, so a backup is never less safe
than a corrected policy action.

- ``hold``: damp the joints to standstill where they are, with gravity compensation.
  It never commands a position, so it cannot "halt" by driving to zero angles.
- ``brake``: remove the whole velocity as fast as the torque limit allows.
- ``go_home``: move slowly (a fraction of the velocity limit) to the home pose.

Invariant: every backup is a pure function of the current state; none keeps a target
pose that could go stale.
"""

from __future__ import annotations

from typing import Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tether.safety.limits import SafetyLimits
from tether.safety.response import step_response

BackupKind = Literal["hold", "brake", "go_home"]


class BackupConfig(BaseModel):
    """Which backup a robot uses and how it behaves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: BackupKind = Field(
        default="hold", description="Backup action: hold, brake or go_home (-)"
    )
    hold_damping: float = Field(
        default=0.3,
        gt=0.0,
        le=1.0,
        description="Fraction of the joint velocity hold removes per control step (1)",
    )
    home_speed_fraction: float = Field(
        default=0.2,
        gt=0.0,
        le=1.0,
        description="go_home's top speed as a fraction of each joint's velocity limit (1)",
    )
    home_time_constant_s: float = Field(
        default=1.0, gt=0.0, description="go_home approach time constant near the home pose (s)"
    )


class Backup(Protocol):
    name: str

    def action(self, q: np.ndarray, v: np.ndarray, u_gravity: np.ndarray) -> np.ndarray:
        """Normalized torques (n,) for joint positions ``q`` and velocities ``v``."""
        ...


class _VelocityServo:
    """Shared arithmetic: the action that changes each joint's velocity by ``dv`` in one step."""

    def __init__(self, limits: SafetyLimits) -> None:
        # At the fastest gain, so the servo never overshoots its target speed.
        response = step_response(
            limits.acceleration_per_action_rad_s2, limits.damping_per_rad_s, limits.control_period_s
        )
        self._decay = np.asarray(response.decay, dtype=np.float64)
        self._per_velocity = np.asarray(response.per_velocity, dtype=np.float64)

    def toward(self, v: np.ndarray, v_target: np.ndarray, u_gravity: np.ndarray) -> np.ndarray:
        u: np.ndarray = u_gravity + (v_target - v * self._decay) * self._per_velocity
        return u


class HoldBackup(_VelocityServo):
    name = "hold"

    def __init__(self, limits: SafetyLimits, damping: float = 0.3) -> None:
        super().__init__(limits)
        self._damping = damping
        # Fraction of the velocity removed per step: the supervisor learns unmodelled
        # loads from the velocity left under a stop (0 for backups that move).
        self.velocity_damping = damping

    def action(self, q: np.ndarray, v: np.ndarray, u_gravity: np.ndarray) -> np.ndarray:
        return self.toward(v, (1.0 - self._damping) * v, u_gravity)


class BrakeBackup(_VelocityServo):
    name = "brake"
    velocity_damping = 1.0

    def action(self, q: np.ndarray, v: np.ndarray, u_gravity: np.ndarray) -> np.ndarray:
        return self.toward(v, np.zeros_like(v), u_gravity)


class GoHomeBackup(_VelocityServo):
    name = "go_home"

    def __init__(
        self, limits: SafetyLimits, speed_fraction: float = 0.2, time_constant_s: float = 1.0
    ) -> None:
        super().__init__(limits)
        self._home = np.asarray(limits.home_position_rad, dtype=np.float64)
        self._v_home = speed_fraction * np.asarray(limits.velocity_limit_rad_s, dtype=np.float64)
        self._tau = time_constant_s

    def action(self, q: np.ndarray, v: np.ndarray, u_gravity: np.ndarray) -> np.ndarray:
        v_target = np.clip((self._home - q) / self._tau, -self._v_home, self._v_home)
        return self.toward(v, v_target, u_gravity)


def make_backup(limits: SafetyLimits, config: BackupConfig | None = None) -> Backup:
    """The backup ``config`` names, built for ``limits``."""
    cfg = config or BackupConfig()
    if cfg.kind == "hold":
        return HoldBackup(limits, cfg.hold_damping)
    if cfg.kind == "brake":
        return BrakeBackup(limits)
    return GoHomeBackup(limits, cfg.home_speed_fraction, cfg.home_time_constant_s)
