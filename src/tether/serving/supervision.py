"""Supervisors for a robot spec: one per session, sharing limits and kinematics.

Every supervisor keeps per-robot state (where its robot was last seen), so the server
gives each Control session its own; limits and kinematics are immutable or used one
batch at a time, so they are shared.
"""

from __future__ import annotations

from collections.abc import Callable

from tether.safety.kinematics import Kinematics
from tether.safety.limits import SafetyLimits
from tether.safety.supervisor import Supervisor
from tether.spec import RobotSpec


def kinematics_for(spec: RobotSpec) -> Kinematics | None:
    """The built-in arm's kinematics when ``spec`` is that arm, else None (joint checks only)."""
    from tether.sim import ArmKinematics, arm_spec

    if spec.fingerprint() == arm_spec().fingerprint():
        return ArmKinematics()
    return None


def supervisor_factory(spec: RobotSpec) -> tuple[Callable[[], Supervisor], SafetyLimits]:
    """A factory of per-session supervisors sharing limits and kinematics.

    Kinematics are shared: every supervisor runs inside the batcher, one batch at a time.
    """
    limits = SafetyLimits.from_spec(spec)
    kinematics = kinematics_for(spec)
    return (lambda: Supervisor(limits, kinematics=kinematics)), limits
