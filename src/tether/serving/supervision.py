"""The safety side of serving: one supervisor per session, driven by the degradation level.

Every supervisor keeps per-robot state (where its robot was last seen), so each Control
session gets its own ``SessionSupervisor``; limits and kinematics are shared (immutable,
or used one batch at a time inside the batcher). The degradation machine decides what
the supervisor enforces: the base limits at NORMAL, the tightened ones below it, and at
TAKEOVER the backup action replaces the policy's. Every verdict is fed back to the
machine, with the version that proposed the action.

Invariant: ``decide`` is the only way serving turns a proposed action into one it may
send, and it always returns the output of ``Supervisor.filter`` or
``Supervisor.backup_action`` (finite, within limits).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tether.safety.degradation import DegradationMachine
from tether.safety.degradation_config import DegradationConfig
from tether.safety.kinematics import Kinematics
from tether.safety.levels import DegradationLevel, EventKind
from tether.safety.limits import SafetyLimits
from tether.safety.presets import default_limits
from tether.safety.supervisor import Supervisor
from tether.safety.verdict import SafetyVerdict
from tether.spec import RobotSpec


def kinematics_for(spec: RobotSpec) -> Kinematics | None:
    """The built-in arm's kinematics when ``spec`` is that arm, else None (joint checks only)."""
    from tether.sim import ArmKinematics, arm_spec

    if spec.fingerprint() == arm_spec().fingerprint():
        return ArmKinematics()
    return None


class SessionSupervisor:
    """One robot's supervisor at every degradation level (see the module docstring)."""

    def __init__(self, base: Supervisor, degradation: DegradationMachine | None = None) -> None:
        self._base = base
        self._degradation = degradation
        self._restricted: Supervisor | None = None

    def decide(
        self,
        observation: np.ndarray,
        proposed: np.ndarray,
        previous: np.ndarray | None,
        *,
        observation_age_s: float,
        level: DegradationLevel,
        policy_version: int,
        tightened: bool = False,
    ) -> tuple[np.ndarray, SafetyVerdict]:
        """Filter one action at ``level``; ``tightened`` (a canary's step) applies the
        RESTRICTED limits even at NORMAL."""
        if level is DegradationLevel.TAKEOVER:
            action, verdict = self._base.backup_action(observation, previous)
        else:
            normal = level is DegradationLevel.NORMAL and not tightened
            supervisor = self._base if normal else self._tight()
            action, verdict = supervisor.filter(
                observation, proposed, previous, observation_age_s=observation_age_s
            )
        if self._degradation is not None:
            self._degradation.observe(verdict, policy_version=policy_version)
        return action, verdict

    def watchdog_misses(self, count: int, policy_version: int | None) -> None:
        """Clients' watchdog misses count towards degradation like interventions do."""
        if self._degradation is not None:
            for _ in range(count):
                self._degradation.report(EventKind.WATCHDOG_MISS, policy_version=policy_version)

    def _tight(self) -> Supervisor:
        if self._restricted is None:
            if self._degradation is not None:
                limits = self._degradation.limits_for(DegradationLevel.RESTRICTED)
            else:  # a canary on a server without a degradation machine
                limits = self._base.limits.tightened(DegradationConfig().restricted_tighten_factor)
            self._restricted = self._base.with_limits(limits)
        return self._restricted


class SupervisorFactory:
    """Makes ``SessionSupervisor``s for one robot spec; owns the shared limits."""

    def __init__(
        self,
        spec: RobotSpec,
        *,
        limits: SafetyLimits | None = None,
        kinematics: Kinematics | None = None,
        degradation: DegradationMachine | None = None,
    ) -> None:
        self.limits = limits or default_limits(spec)
        self.kinematics = kinematics if kinematics is not None else kinematics_for(spec)
        self.degradation = degradation

    def __call__(self) -> SessionSupervisor:
        return SessionSupervisor(
            Supervisor(self.limits, kinematics=self.kinematics), self.degradation
        )

    def level(self) -> DegradationLevel:
        return DegradationLevel.NORMAL if self.degradation is None else self.degradation.level


SupervisorSource = Callable[[], SessionSupervisor]
