"""PositionSupervisor, check by check: each named check fires with its bit and says how
far it moved the command; unusable inputs get the backup; the change is remembered."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tether.safety import PASSED, ActionSource, BackupConfig, LimitsError, SafetyCheck
from tether.safety.chain_gravity import chain_gravity
from tether.safety.position import (
    BrakeCommand,
    GoHomeCommand,
    HoldCommand,
    ImpedanceModel,
    PositionSupervisor,
    PositionSupervisorConfig,
    PositionVerdict,
)
from tether.safety.position.presets import (
    arm_impedance,
    arm_position_limits,
    arm_position_supervisor,
)
from tether.sim import ArmKinematics, arm_spec

ARM_IMPEDANCE = arm_impedance()
SPEC = arm_spec("position")
LIMITS = arm_position_limits()
# Without obstacle and workspace: the joint checks alone (gravity still from the arm).
JOINT_LIMITS = dataclasses.replace(LIMITS, workspace=None, obstacles=())
KINEMATICS = ArmKinematics(SPEC)
HOME = np.asarray(SPEC.home_position_rad, dtype=np.float64)
DT = LIMITS.control_period_s
STEP = np.asarray(LIMITS.velocity_limit_rad_s) * DT
ACCEL_STEP = np.asarray(LIMITS.acceleration_limit_rad_s2) * DT * DT


def obs(q: np.ndarray, v: np.ndarray | None = None) -> np.ndarray:
    out = np.zeros(SPEC.obs_dim, dtype=np.float32)
    out[:4] = q
    out[4:8] = 0.0 if v is None else v
    return out


def joint_supervisor(compiled: bool | None = None, **config: object) -> PositionSupervisor:
    return PositionSupervisor(
        JOINT_LIMITS,
        ARM_IMPEDANCE,
        kinematics=KINEMATICS,
        config=PositionSupervisorConfig(**config),  # type: ignore[arg-type]
        compiled=compiled,
    )


def test_a_command_at_the_measured_pose_passes_bit_identical() -> None:
    command = HOME.astype(np.float32)
    out, verdict = joint_supervisor().filter(obs(HOME), command)
    assert out is command
    assert verdict is PASSED


def test_a_small_step_from_the_previous_command_passes() -> None:
    sup = joint_supervisor()
    previous, _ = sup.filter(obs(HOME), HOME.astype(np.float32))
    command = (HOME + 0.3 * ACCEL_STEP).astype(np.float32)
    out, verdict = sup.filter(obs(HOME), command, previous)
    assert verdict is PASSED
    assert out.tobytes() == command.tobytes()


def test_per_step_change_is_the_velocity_limit_times_the_period() -> None:
    sup = joint_supervisor()
    previous = HOME.astype(np.float32)
    # Moving at the velocity limit already (the change remembered from the arm's speed).
    v = np.asarray(LIMITS.velocity_limit_rad_s) * 0.999
    command = (HOME + 3 * STEP).astype(np.float32)
    out, verdict = sup.filter(obs(HOME, v), command, previous)
    assert verdict.checks & SafetyCheck.VELOCITY
    assert np.all(np.abs(out - previous) <= STEP + 1e-9)
    assert isinstance(verdict, PositionVerdict)
    assert verdict.moved_by(SafetyCheck.VELOCITY) > 0.0
    assert verdict.source is ActionSource.CLIPPED
    assert verdict.joints == (0, 1, 2, 3)


def test_change_of_the_change_is_the_acceleration_limit_times_the_period_squared() -> None:
    sup = joint_supervisor()
    previous = HOME.astype(np.float32)
    command = (HOME + 0.5 * STEP).astype(np.float32)  # from rest: too sudden
    out, verdict = sup.filter(obs(HOME), command, previous)
    assert verdict.checks == SafetyCheck.ACCELERATION
    assert np.all(np.abs(out.astype(np.float64) - HOME) <= ACCEL_STEP + 1e-9)
    assert isinstance(verdict, PositionVerdict)
    assert verdict.moved_by(SafetyCheck.ACCELERATION) == pytest.approx(
        float(np.linalg.norm(command - out)), rel=1e-3
    )


def test_the_change_is_remembered_from_the_command_returned() -> None:
    """Accelerating by the limit each step: the remembered change lets the command speed
    up; a command from elsewhere (not this supervisor's) is judged from the arm's speed."""
    sup = joint_supervisor()
    previous = HOME.astype(np.float32)
    for k in range(1, 5):
        target = previous.astype(np.float64) + k * ACCEL_STEP * 0.99
        out, verdict = sup.filter(obs(HOME), target.astype(np.float32), previous)
        assert verdict is PASSED, k
        previous = out
    # The next command, from a supervisor that did not make the previous one: for it the
    # command has been at rest (the arm is), so the step is a jump.
    target = (previous.astype(np.float64) + 5 * ACCEL_STEP * 0.99).astype(np.float32)
    assert sup.filter(obs(HOME), target, previous)[1] is PASSED
    _, verdict = joint_supervisor().filter(obs(HOME), target, previous)
    assert verdict.checks == SafetyCheck.ACCELERATION


def test_joint_range_with_a_braking_curve() -> None:
    """Toward the upper limit at speed: the command slows before the margin so it can
    stop inside it decelerating at the acceleration limit."""
    sup = joint_supervisor()
    high = np.asarray(LIMITS.position_high_rad) - np.asarray(LIMITS.position_margin_rad)
    reference = high - 1.5 * STEP
    change = STEP * 0.999
    sup._last = (reference.astype(np.float32).tolist(), change.tolist())
    previous = reference.astype(np.float32)
    command = (previous + change).astype(np.float32)
    out, verdict = sup.filter(obs(reference - 0.01, change / DT), command, previous)
    assert verdict.checks & SafetyCheck.POSITION
    step = out.astype(np.float64) - previous
    assert np.all(out + step**2 / (2 * ACCEL_STEP) <= high + 1e-9)


def _settling_at(sup: PositionSupervisor, sag: float, proposed: float) -> list[float]:
    """Shoulder commands of an arm that rests ``sag`` rad beyond each (the drifted arm
    under its payload): it rests at two places (the supervisor learns the sag where two
    agree), then the policy asks for ``proposed`` rad every step."""
    command = np.asarray(SPEC.home_position_rad, dtype=np.float32)
    offset = np.array([0.0, sag, 0.0, 0.0])
    out: list[float] = []
    for shoulder, steps in ((1.3, 60), (1.5, 40), (proposed, 60)):
        target = command.copy()
        target[1] = shoulder
        for _ in range(steps):
            command, _ = sup.filter(obs(command + offset), target, command)
            out.append(float(command[1]))
    return out


@pytest.mark.parametrize("compiled", [True, False])
def test_an_arm_sagging_toward_a_joint_limit_is_kept_inside_its_margin(compiled: bool) -> None:
    """The arm rests 0.06 rad beyond its commands, toward the shoulder's upper limit:
    the commands stop where the arm settles at the margin (the command plus the sag),
    not where the command does, which left the drifted arm inside the margin and a
    swing of the other joints carried it past the limit (``random_commands`` drifted
    seed 178). A sag away from the limit does not loosen the margin."""
    soft_hi = LIMITS.position_high_rad[1] - LIMITS.position_margin_rad[1]
    sup = joint_supervisor(compiled=compiled)
    toward = _settling_at(sup, 0.06, soft_hi)
    assert max(toward) + 0.06 <= soft_hi + 1e-6
    assert toward[-1] + 0.06 > soft_hi - 1e-3  # and goes that far
    away = _settling_at(joint_supervisor(compiled=compiled), -0.06, soft_hi + 0.1)
    assert soft_hi - 1e-3 < max(away) <= soft_hi


def test_a_command_beyond_the_range_is_moved_inside() -> None:
    sup = joint_supervisor()
    high = np.asarray(LIMITS.position_high_rad)
    q = high - 0.06
    previous = q.astype(np.float32)
    out, verdict = sup.filter(obs(q), (high + 1.0).astype(np.float32), previous)
    assert verdict.checks & SafetyCheck.POSITION or verdict.checks & SafetyCheck.VELOCITY
    assert np.all(out <= high - np.asarray(LIMITS.position_margin_rad))


def test_the_impedance_torque_stays_within_the_motor_limits() -> None:
    """A stiff command far from a lagging arm would saturate the motors."""
    q = HOME.copy()
    # The previous command, well ahead of the arm, and at rest.
    reference = (HOME + 0.6).astype(np.float32)
    sup = joint_supervisor()
    sup._last = (reference.tolist(), [0.0] * 4)
    out, verdict = sup.filter(obs(q), reference, reference)
    assert verdict.checks & SafetyCheck.TORQUE
    gravity = KINEMATICS.gravity_torque(q)
    kp = np.asarray(ARM_IMPEDANCE.stiffness_nm_per_rad)
    tau = kp * (out.astype(np.float64) - q) + gravity
    limit = np.asarray(LIMITS.torque_limit_nm)
    # Where the torque limit conflicted with the rate limits, the rate limits won;
    # elsewhere it holds.
    rate_ok = np.abs(out - reference) <= ACCEL_STEP + 1e-9
    assert np.all((np.abs(tau) <= limit + 1e-6) | rate_ok)
    assert isinstance(verdict, PositionVerdict)
    assert verdict.moved_by(SafetyCheck.TORQUE) > 0.0


@pytest.mark.parametrize(
    ("command", "bit"),
    [
        ([np.nan, 0.0, 0.0, 0.0], SafetyCheck.NON_FINITE),
        ([np.inf, 0.0, 0.0, 0.0], SafetyCheck.NON_FINITE),
        ([0.0, 0.0, 0.0], SafetyCheck.INVALID_SHAPE),
        ("home", SafetyCheck.INVALID_SHAPE),
        (None, SafetyCheck.INVALID_SHAPE),
    ],
)
def test_unusable_commands_get_the_hold(command: object, bit: SafetyCheck) -> None:
    sup = joint_supervisor()
    previous = (HOME + 0.01).astype(np.float32)
    out, verdict = sup.filter(obs(HOME), command, previous)
    assert verdict.checks & bit
    assert verdict.source is ActionSource.BACKUP
    assert np.isfinite(out).all()
    # hold keeps the previous command (it was at rest, so it may stay there)
    assert out.tobytes() == previous.tobytes()


def test_a_stale_observation_holds_the_last_command() -> None:
    sup = joint_supervisor()
    previous = (HOME + 0.01).astype(np.float32)
    out, verdict = sup.filter(
        obs(HOME), (HOME + 0.02).astype(np.float32), previous, observation_age_s=1.0
    )
    assert verdict.checks == SafetyCheck.STALE
    assert verdict.source is ActionSource.BACKUP
    assert out.tobytes() == previous.tobytes()


def test_an_unreadable_observation_repeats_the_last_command_known() -> None:
    sup = joint_supervisor()
    first, _ = sup.filter(obs(HOME), HOME.astype(np.float32))
    for bad in (obs(HOME)[:5], np.full(SPEC.obs_dim, np.nan), "obs", None):
        out, verdict = sup.filter(bad, HOME.astype(np.float32))
        assert verdict.checks == SafetyCheck.INVALID_OBSERVATION
        assert out.tobytes() == first.tobytes()
    fresh, verdict = joint_supervisor().filter(None, HOME)
    assert verdict.source is ActionSource.BACKUP
    assert np.allclose(fresh, HOME, atol=1e-5)


def test_an_unusable_previous_command_is_flagged_and_ignored() -> None:
    for previous in ([np.nan] * 4, [0.0, 0.0], [100.0, 0.0, 0.0, 0.0]):
        out, verdict = joint_supervisor().filter(obs(HOME), HOME.astype(np.float32), previous)
        assert verdict.checks == SafetyCheck.INVALID_PREVIOUS
        assert verdict.source is ActionSource.POLICY
        assert out.tobytes() == HOME.astype(np.float32).tobytes()


def test_takeover_gets_the_backup_through_the_limits() -> None:
    sup = joint_supervisor(backup=BackupConfig(kind="go_home"))
    q = HOME + 0.5
    out, verdict = sup.backup_action(obs(q), q.astype(np.float32))
    assert verdict.checks == SafetyCheck.TAKEOVER
    assert verdict.source is ActionSource.BACKUP
    # go_home heads home, rate-limited
    assert np.all(out < q)
    assert np.all(np.abs(out - q) <= ACCEL_STEP + 1e-6)


def test_backups_propose_their_targets() -> None:
    q, ref = [0.0, 0.1, 0.2, 0.3], [0.5, 0.5, 0.5, 0.5]
    assert HoldCommand().target(q, ref) == ref
    assert BrakeCommand().target(q, ref) == q
    home = GoHomeCommand(LIMITS).target(q, ref)
    assert all(abs(h - r) <= s + 1e-12 for h, r, s in zip(home, ref, 0.2 * STEP, strict=True))


def test_with_limits_and_take_state_carry_the_remembered_change() -> None:
    sup = joint_supervisor()
    previous = HOME.astype(np.float32)
    sup.filter(obs(HOME), (HOME + 0.99 * ACCEL_STEP).astype(np.float32), previous)
    tight = sup.with_limits(JOINT_LIMITS.tightened(0.5))
    tight.take_state(sup)
    assert tight._last == sup._last
    assert tight.limits.velocity_limit_rad_s == tuple(
        0.5 * v for v in JOINT_LIMITS.velocity_limit_rad_s
    )


def test_the_closed_form_gravity_matches_the_kinematics_with_and_without_payload() -> None:
    rng = np.random.default_rng(0)
    for payload in (0.0, 0.5):
        kin = ArmKinematics(SPEC, payload_mass_kg=payload)
        gravity = chain_gravity(kin, 4)
        assert gravity is not None
        for _ in range(20):
            q = rng.uniform(SPEC.joint_position_low_rad, SPEC.joint_position_high_rad)
            np.testing.assert_allclose(
                gravity.torques(q.tolist()), kin.gravity_torque(q), rtol=0, atol=1e-9
            )


def test_impedance_model_validation_and_defaults() -> None:
    assert ImpedanceModel.from_spec(SPEC) == ARM_IMPEDANCE
    assert ARM_IMPEDANCE.stiffness_nm_per_rad == SPEC.joint_stiffness_nm_rad
    assert ARM_IMPEDANCE.damping_nm_s_per_rad == SPEC.joint_damping_nm_s_rad
    with pytest.raises(LimitsError, match="stiffness"):
        ImpedanceModel((1.0, 0.0), (0.0, 0.0))
    with pytest.raises(LimitsError, match="damping"):
        ImpedanceModel((1.0, 1.0), (0.0, -1.0))
    with pytest.raises(LimitsError, match="one stiffness"):
        ImpedanceModel((1.0,), (0.0, 0.0))
    with pytest.raises(LimitsError, match="commanded by torque"):
        ImpedanceModel.from_spec(arm_spec("torque"))
    with pytest.raises(ValueError, match="gains for 2 joints"):
        PositionSupervisor(LIMITS, ImpedanceModel((1.0, 1.0), (0.0, 0.0)))


def test_the_arm_preset_supervisor_has_the_cartesian_checks() -> None:
    sup = arm_position_supervisor()
    assert sup._segment.active
    _, verdict = sup.filter(obs(HOME), HOME.astype(np.float32))
    assert verdict is PASSED


@pytest.mark.parametrize(
    "bad",
    [
        ("q", 1e6),
        ("q", -1e6),
        ("q", float(LIMITS.position_high_rad[1]) + 0.6),
        ("v", 1e6),
        ("v", -6.0 * LIMITS.velocity_limit_rad_s[2]),
    ],
)
def test_an_observation_outside_the_physical_envelope_holds_the_last_command(
    bad: tuple[str, float],
) -> None:
    sup = joint_supervisor()
    held, _ = sup.filter(obs(HOME), HOME.astype(np.float32))
    which, value = bad
    q, v = HOME.copy(), np.zeros(4)
    (q if which == "q" else v)[1 if which == "q" else 2] = value
    out, verdict = sup.filter(obs(q, v), np.ones(4, dtype=np.float32), held)
    assert verdict.checks & SafetyCheck.INVALID_OBSERVATION
    assert verdict.source is ActionSource.BACKUP
    assert out.tobytes() == held.tobytes()
    # Inside the envelope (a reading just past the range, a fast joint) it is judged.
    _, verdict = sup.filter(obs(HOME, np.full(4, 0.5)), HOME.astype(np.float32), held)
    assert not verdict.checks & SafetyCheck.INVALID_OBSERVATION
