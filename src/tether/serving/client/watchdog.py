"""The robot-side watchdog: an action within the control deadline, whatever happens.

When the server's reply does not arrive within the control deadline (or the step
failed), the session asks the watchdog for a backup action — by default the safety
layer's own backup, computed locally from the robot spec under the limits the server
enforces and of the kind its supervisor answers with (its ``Describe``: a deployment's
stricter ``--limits`` and its ``supervision`` hold for the watchdog too; hold where the
server names none) — flags it ``from_watchdog`` and counts the miss.
The running miss count travels to the server in the next step, so the server sees its
robots' misses in its metrics.

Invariant: ``fallback`` does no I/O and never waits, so the control loop keeps its rate.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from tether.serving.client.records import ActionResult
from tether.spec import RobotSpec

if TYPE_CHECKING:
    from tether.safety.for_spec import SupervisionConfig
    from tether.safety.kinematics import Kinematics
    from tether.safety.limits import SafetyLimits

logger = logging.getLogger(__name__)

# (observation, previous executed action or None) -> action to execute instead.
BackupPolicy = Callable[[np.ndarray, np.ndarray | None], np.ndarray]


def safety_backup(
    spec: RobotSpec,
    limits: SafetyLimits | None = None,
    kinematics: Kinematics | None = None,
    supervision: SupervisionConfig | None = None,
) -> BackupPolicy:
    """The supervisor's backup action for ``spec``, within limits: under ``limits``, with
    ``kinematics`` and ``supervision`` where given (the server's: ``--limits``,
    ``--kinematics``, its config's ``supervision``), else the defaults ``supervisor_for``
    takes (hold)."""
    from tether.safety.for_spec import supervisor_for

    supervisor = supervisor_for(spec, limits, kinematics=kinematics, supervision=supervision)

    def backup_action(observation: np.ndarray, previous: np.ndarray | None) -> np.ndarray:
        action, _ = supervisor.backup_action(observation, previous)
        return action

    return backup_action


def served_limits(spec: RobotSpec, limits_json: str) -> SafetyLimits | None:
    """The limits a server enforces (``DescribeResponse.safety_limits_json``) for a robot
    of ``spec``; None where it sent none, or limits of other joints (a server of another
    robot, which refuses the session at its open)."""
    if not limits_json:
        return None
    from tether.safety.limits import SafetyLimits

    limits = SafetyLimits.from_dict(json.loads(limits_json))
    return limits if limits.joint_names == spec.joint_names else None


def served_supervision(supervision_json: str) -> SupervisionConfig | None:
    """A server's supervisor settings (``DescribeResponse.supervision_json``: its
    backup); None where it sent none, or settings this client cannot read (the watchdog
    then holds, and says so in the log)."""
    if not supervision_json:
        return None
    from pydantic import ValidationError

    from tether.safety.for_spec import SupervisionConfig

    try:
        return SupervisionConfig.model_validate_json(supervision_json)
    except ValidationError as exc:
        logger.warning(
            "the server's supervision %s is not one this client knows (%s); the watchdog holds",
            supervision_json,
            exc.errors()[0]["msg"],
        )
        return None


class Watchdog:
    """Counts misses and produces flagged backup actions."""

    def __init__(self, backup: BackupPolicy, control_deadline_s: float) -> None:
        if not control_deadline_s > 0:
            raise ValueError(f"control_deadline_s must be positive, got {control_deadline_s}")
        self.backup = backup
        self.control_deadline_s = control_deadline_s
        self.misses = 0
        self.last_reason = ""

    def fallback(
        self, observation: np.ndarray, previous: np.ndarray | None, reason: str
    ) -> ActionResult:
        self.misses += 1
        self.last_reason = reason
        return ActionResult.backup(self.backup(observation, previous), reason)
