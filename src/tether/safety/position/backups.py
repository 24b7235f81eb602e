"""Backup commands for a position-commanded robot: what it is told when the policy's
command cannot be used (unusable, stale, TAKEOVER).

A backup proposes a target position; the supervisor passes it through the same joint
intervals and swept Cartesian check as a policy command, so a backup is never less safe
than a corrected command, and every backup is rate-limited by construction.

- ``hold`` (default): keep the command where it is (the previous command; the measured
  pose when there is none). Under the acceleration limit a moving command decelerates
  to rest there, and the impedance controller settles the arm on it. A stale
  observation cannot move the hold: it holds the last command, not an old pose.
- ``brake``: ramp the command to the measured pose, so the arm stops where it is now.
- ``go_home``: move the command toward the home pose at ``home_speed_fraction`` of each
  joint's velocity limit, slowing within ``home_time_constant_s`` of it.

Invariant: every backup is a pure function of the measured pose, the reference command
and the limits; none keeps a target of its own that could go stale.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tether.safety.backups import BackupConfig
from tether.safety.limits import SafetyLimits


class CommandBackup(Protocol):
    name: str

    def target(self, q: Sequence[float], reference: Sequence[float]) -> list[float]:
        """The commanded position (n,) to propose, from the measured pose ``q`` and the
        reference command (the previous command, or ``q``)."""
        ...


class HoldCommand:
    name = "hold"

    def target(self, q: Sequence[float], reference: Sequence[float]) -> list[float]:
        return list(reference)


class BrakeCommand:
    name = "brake"

    def target(self, q: Sequence[float], reference: Sequence[float]) -> list[float]:
        return list(q)


class GoHomeCommand:
    name = "go_home"

    def __init__(
        self, limits: SafetyLimits, speed_fraction: float = 0.2, time_constant_s: float = 1.0
    ) -> None:
        dt = limits.control_period_s
        self._home = tuple(limits.home_position_rad)
        self._step = tuple(speed_fraction * v * dt for v in limits.velocity_limit_rad_s)
        self._gain = dt / time_constant_s if time_constant_s > dt else 1.0

    def target(self, q: Sequence[float], reference: Sequence[float]) -> list[float]:
        out: list[float] = []
        for r, home, step in zip(reference, self._home, self._step, strict=True):
            d = (home - r) * self._gain
            out.append(r + (-step if d < -step else step if d > step else d))
        return out


def make_command_backup(limits: SafetyLimits, config: BackupConfig | None = None) -> CommandBackup:
    """The backup ``config`` names (``hold_damping`` is a torque backup's and unused here)."""
    cfg = config or BackupConfig()
    if cfg.kind == "hold":
        return HoldCommand()
    if cfg.kind == "brake":
        return BrakeCommand()
    return GoHomeCommand(limits, cfg.home_speed_fraction, cfg.home_time_constant_s)
