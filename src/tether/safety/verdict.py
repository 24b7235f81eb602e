"""What the supervisor did to one action, as a small typed record.

A :class:`SafetyVerdict` travels with every executed action: into the reply, the
metrics, the recorded transition and the degradation machine. Invariant: any change
to the action sets at least one check bit and a source other than ``POLICY``; an action
returned untouched has ``source=POLICY``, zero correction norm and no joints (its only
possible bit is ``INVALID_PREVIOUS``, which changes nothing but is worth counting).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntFlag, StrEnum
from functools import lru_cache


class ActionSource(StrEnum):
    """Who produced the executed action."""

    POLICY = "policy"  # the policy's action, unchanged
    CLIPPED = "clipped"  # the policy's action, corrected by the supervisor
    BACKUP = "backup"  # a backup action replaced the policy's (invalid input, stale, takeover)
    HUMAN = "human"  # a person's override, reported by the robot (set by serving)


class SafetyCheck(IntFlag):
    """One bit per check; a bit is set when that check changed or replaced the action."""

    NONE = 0
    INVALID_SHAPE = 1 << 0  # proposed action has the wrong shape
    NON_FINITE = 1 << 1  # proposed action holds NaN or +-Inf
    INVALID_OBSERVATION = 1 << 2  # observation has the wrong shape or is not finite
    INVALID_PREVIOUS = 1 << 3  # previous action unusable: rate limit taken from standstill
    STALE = 1 << 4  # the command is older than the staleness limit
    TORQUE = 1 << 5  # beyond the per-joint torque limit
    POSITION = 1 << 6  # would not stop inside the position limits (braking distance)
    VELOCITY = 1 << 7  # would exceed the joint velocity limit
    ACCELERATION = 1 << 8  # would exceed the joint acceleration limit
    RATE = 1 << 9  # changes the command more than allowed per control step
    WORKSPACE = 1 << 10  # end effector would leave the workspace box
    OBSTACLE = 1 << 11  # a collision sphere would come too close to an obstacle
    TAKEOVER = 1 << 12  # the degradation level put the backup in control


@lru_cache(maxsize=256)
def check_names(checks: int) -> tuple[str, ...]:
    """Names of the single-bit checks set in ``checks``, lowest bit first."""
    return tuple(
        m.name or str(m.value)
        for m in SafetyCheck
        if m.value and m.value & (m.value - 1) == 0 and checks & m.value
    )


# Checks that replace the action with a backup rather than correct it.
REPLACING_CHECKS = (
    SafetyCheck.INVALID_SHAPE
    | SafetyCheck.NON_FINITE
    | SafetyCheck.INVALID_OBSERVATION
    | SafetyCheck.STALE
    | SafetyCheck.TAKEOVER
)


# The bits as plain ints, for the supervisors' per-action paths that OR them together
# (IntFlag arithmetic costs far more than int arithmetic there).
INVALID_SHAPE_BIT = int(SafetyCheck.INVALID_SHAPE)
NON_FINITE_BIT = int(SafetyCheck.NON_FINITE)
INVALID_OBSERVATION_BIT = int(SafetyCheck.INVALID_OBSERVATION)
INVALID_PREVIOUS_BIT = int(SafetyCheck.INVALID_PREVIOUS)
STALE_BIT = int(SafetyCheck.STALE)
TORQUE_BIT = int(SafetyCheck.TORQUE)
POSITION_BIT = int(SafetyCheck.POSITION)
VELOCITY_BIT = int(SafetyCheck.VELOCITY)
ACCELERATION_BIT = int(SafetyCheck.ACCELERATION)
RATE_BIT = int(SafetyCheck.RATE)
WORKSPACE_BIT = int(SafetyCheck.WORKSPACE)
OBSTACLE_BIT = int(SafetyCheck.OBSTACLE)
TAKEOVER_BIT = int(SafetyCheck.TAKEOVER)
REPLACING_BITS = int(REPLACING_CHECKS)

# Finite inputs are clipped to this before the float32 cast, so 1e300 stays finite;
# anything beyond the limits is corrected anyway.
CLIP_BEFORE_CAST = 1e6


@dataclass(frozen=True)
class SafetyVerdict:
    """The supervisor's account of one action.

    ``correction_norm`` is the Euclidean distance between the proposed and the executed
    action (normalized torque units); when the proposal was unusable (wrong shape or
    not finite) it is the norm of the executed action instead, so it stays finite.
    ``joints`` are the indices whose value changed.
    """

    source: ActionSource
    checks: SafetyCheck
    correction_norm: float
    joints: tuple[int, ...]

    @property
    def intervened(self) -> bool:
        return self.source is not ActionSource.POLICY


PASSED = SafetyVerdict(ActionSource.POLICY, SafetyCheck.NONE, 0.0, ())
