"""Supervisor.filter: validation, backups, uniform scaling, verdicts, takeover."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from safety.builders import (
    N_JOINTS,
    PlanarArm,
    observation,
    planar_limits,
    seven_joint_limits,
)
from tether.safety import (
    PASSED,
    ActionSource,
    BackupConfig,
    LimitsConfig,
    SafetyCheck,
    Supervisor,
    SupervisorConfig,
)

LIMITS = seven_joint_limits()
HOME = np.asarray(LIMITS.home_position_rad)
# Limits where only the rate limit binds near home at rest.
RATE_ONLY = seven_joint_limits(
    LimitsConfig(acceleration_limit_scale=3.0, max_action_change_per_step=0.5)
)


def _obs(q: np.ndarray = HOME, v: np.ndarray | None = None) -> np.ndarray:
    return observation(LIMITS, q, np.zeros(N_JOINTS) if v is None else v)


MOVING = np.array([0.5, -0.5, 0.3, -0.3, 0.2, -0.2, 0.1])


@pytest.mark.parametrize(
    ("action", "check"),
    [
        ([0.1] * (N_JOINTS - 1), SafetyCheck.INVALID_SHAPE),
        ([[0.1] * N_JOINTS], SafetyCheck.INVALID_SHAPE),
        ("left", SafetyCheck.INVALID_SHAPE),
        (None, SafetyCheck.INVALID_SHAPE),
        ({"j0": 1.0}, SafetyCheck.INVALID_SHAPE),
        ([np.nan] + [0.0] * (N_JOINTS - 1), SafetyCheck.NON_FINITE),
        ([np.inf] * N_JOINTS, SafetyCheck.NON_FINITE),
        ([0.0] * (N_JOINTS - 1) + [-np.inf], SafetyCheck.NON_FINITE),
    ],
)
def test_unusable_actions_are_replaced_by_the_backup_and_flagged(
    action: Any, check: SafetyCheck
) -> None:
    supervisor = Supervisor(LIMITS)
    out, verdict = supervisor.filter(_obs(v=MOVING), action)
    assert verdict.source is ActionSource.BACKUP
    assert verdict.checks & check
    assert verdict.joints == tuple(range(N_JOINTS))
    assert np.all(np.isfinite(out))
    assert np.isfinite(verdict.correction_norm)
    # The default backup (hold) damps the motion: every torque opposes its joint's velocity.
    assert np.all(np.sign(out) == -np.sign(MOVING))


@pytest.mark.parametrize(
    "bad_observation",
    [
        np.full(20, np.nan, dtype=np.float32),
        np.zeros(5, dtype=np.float32),
        np.zeros((2, 20), dtype=np.float32),
        "observation",
        None,
    ],
)
def test_an_unreadable_observation_holds_the_last_pose_against_gravity(
    bad_observation: Any,
) -> None:
    limits = planar_limits()
    arm = PlanarArm(gravity_nm=4.0)
    supervisor = Supervisor(limits, kinematics=arm)
    out, verdict = supervisor.filter(bad_observation, [0.1, 0.1])
    assert verdict.checks == SafetyCheck.INVALID_OBSERVATION
    np.testing.assert_array_equal(out, np.zeros(2, dtype=np.float32))  # nothing seen yet
    q = np.array([0.3, 0.2])
    supervisor.filter(observation(limits, q, np.zeros(2), size=10), [0.0, 0.0])
    out, verdict = supervisor.filter(bad_observation, [0.1, 0.1])
    assert verdict.source is ActionSource.BACKUP
    hold = arm.gravity_torque(q) / np.asarray(limits.action_scale_nm)
    np.testing.assert_allclose(out, hold, rtol=1e-6)
    assert np.all(out != 0)  # never "command zero": the arm would drop


def test_a_stale_command_is_replaced_by_the_backup() -> None:
    supervisor = Supervisor(LIMITS)
    fresh = np.full(N_JOINTS, 0.01, dtype=np.float32)
    out, verdict = supervisor.filter(_obs(), fresh, observation_age_s=0.01)
    assert verdict == PASSED
    out, verdict = supervisor.filter(_obs(), fresh, observation_age_s=0.5)
    assert verdict.source is ActionSource.BACKUP
    assert verdict.checks == SafetyCheck.STALE
    np.testing.assert_array_equal(out, np.zeros(N_JOINTS, dtype=np.float32))


def test_an_unusable_previous_action_is_flagged_and_ignored() -> None:
    supervisor = Supervisor(RATE_ONLY)
    action = np.full(N_JOINTS, 0.9, dtype=np.float32)
    out, verdict = supervisor.filter(_obs(), action, [np.nan] * N_JOINTS)
    assert verdict.checks == SafetyCheck.INVALID_PREVIOUS
    assert verdict.source is ActionSource.POLICY
    assert out.tobytes() == action.tobytes()


def test_a_rate_limited_change_is_scaled_uniformly_so_its_direction_is_kept() -> None:
    supervisor = Supervisor(RATE_ONLY)
    previous = np.zeros(N_JOINTS, dtype=np.float32)
    proposal = np.array([0.9, -0.45, 0.3, 0.0, -0.9, 0.6, 0.1], dtype=np.float32)
    out, verdict = supervisor.filter(_obs(), proposal, previous)
    assert verdict.source is ActionSource.CLIPPED
    assert verdict.checks == SafetyCheck.RATE
    scale = out[0] / proposal[0]
    np.testing.assert_allclose(out, scale * proposal, atol=1e-6)
    assert np.max(np.abs(out - previous)) <= 0.5
    assert verdict.joints == (0, 1, 2, 4, 5, 6)  # joint 3 proposed no change
    assert verdict.correction_norm == pytest.approx(float(np.linalg.norm(out - proposal)))


def test_when_uniform_scaling_would_freeze_the_arm_joints_are_clipped_one_by_one() -> None:
    supervisor = Supervisor(RATE_ONLY, config=SupervisorConfig(uniform_scale_floor=0.25))
    q = HOME.copy()
    q[0] = LIMITS.position_high_rad[0]  # joint 0 at its upper limit: no room to push up
    proposal = np.array([0.9, 0.2, -0.2, 0.1, 0.0, 0.1, -0.1], dtype=np.float32)
    out, verdict = supervisor.filter(_obs(q), proposal)
    assert verdict.checks & SafetyCheck.POSITION
    assert out[0] <= 0.0
    np.testing.assert_array_equal(out[1:], proposal[1:])
    assert verdict.joints == (0,)


def test_backup_action_is_flagged_as_takeover() -> None:
    supervisor = Supervisor(LIMITS, config=SupervisorConfig(backup=BackupConfig(kind="brake")))
    out, verdict = supervisor.backup_action(_obs(v=MOVING))
    assert verdict.source is ActionSource.BACKUP
    assert verdict.checks == SafetyCheck.TAKEOVER
    assert np.all(np.sign(out) == -np.sign(MOVING))


def test_with_limits_enforces_the_new_limits_with_the_same_kinematics() -> None:
    arm = PlanarArm()
    base = Supervisor(planar_limits(), kinematics=arm)
    tight = base.with_limits(base.limits.tightened(0.5))
    assert tight.kinematics is arm
    assert tight.limits.velocity_limit_rad_s == tuple(
        0.5 * v for v in base.limits.velocity_limit_rad_s
    )


def test_plain_lists_and_float64_in_limit_come_back_as_equal_float32() -> None:
    supervisor = Supervisor(LIMITS)
    out, verdict = supervisor.filter(_obs().tolist(), [0.01] * N_JOINTS, [0.0] * N_JOINTS)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.full(N_JOINTS, 0.01, dtype=np.float32))
    assert verdict == PASSED
