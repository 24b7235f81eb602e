"""The position supervisor's swept Cartesian check on the built-in arm's geometry: the
whole segment from the measured pose to the command stays clear of the obstacle and
inside the workspace (or no worse than now), checked here densely with the MuJoCo
kinematics; checking only the command's end pose lets a command jump through the
obstacle."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tether.safety import ActionSource, SafetyCheck
from tether.safety.geometry import Clearance
from tether.safety.position import (
    ImpedanceModel,
    PositionSupervisor,
    PositionSupervisorConfig,
    PositionVerdict,
    kernel,
)
from tether.safety.position.presets import arm_impedance, arm_position_limits
from tether.sim import ArmKinematics, arm_spec

ARM_IMPEDANCE = arm_impedance()
SPEC = arm_spec("position")
N = SPEC.n_joints
LIMITS = arm_position_limits()
KINEMATICS = ArmKinematics(SPEC)
CLEARANCE = Clearance(LIMITS)
LOW = np.asarray(LIMITS.position_low_rad)
HIGH = np.asarray(LIMITS.position_high_rad)
# Joint limits that let a command jump a long way in one step, so only the Cartesian
# check stands between it and the obstacle.
LOOSE = dataclasses.replace(
    LIMITS,
    velocity_limit_rad_s=(1e3,) * N,
    acceleration_limit_rad_s2=(1e6,) * N,
    braking_deceleration_rad_s2=(1e6,) * N,
)
SOFT = ImpedanceModel((1e-3,) * N, (0.0,) * N)
# Yawing from one side of the obstacle to the other with the arm reaching through it.
PITCH = (1.6, 0.6, 0.0)
BEFORE = np.array([-1.2, *PITCH])
AFTER = np.array([1.2, *PITCH])
# Poses between two samples are at most half the spacing (5 mm) closer than a checked one.
SLACK_M = 0.005 + 1e-9


def obs(q: np.ndarray) -> np.ndarray:
    out = np.zeros(SPEC.obs_dim, dtype=np.float32)
    out[:N] = q
    return out


def clearances(q: np.ndarray) -> tuple[float, float]:
    centers, radii = KINEMATICS.collision_spheres(np.asarray(q, dtype=np.float64))
    return (
        CLEARANCE.obstacles(centers, radii),
        CLEARANCE.workspace(KINEMATICS.end_effector(np.asarray(q, dtype=np.float64))),
    )


def segment_breach(start: np.ndarray, end: np.ndarray, samples: int = 400) -> list[str]:
    """Poses on the segment (densely sampled) inside a margin and worse than the start."""
    now = clearances(start)
    found = []
    for f in np.linspace(0.0, 1.0, samples + 1)[1:]:
        pose = start + f * (end.astype(np.float64) - start)
        for name, c, c0 in zip(("obstacle", "workspace"), clearances(pose), now, strict=True):
            if c < -SLACK_M and c < c0 - SLACK_M:
                found.append(f"{name} at {f:.3f}: {c:.4f} m")
    return found


def test_the_jump_runs_through_the_obstacle_between_two_clear_poses() -> None:
    assert min(clearances(BEFORE)) > 0
    assert min(clearances(AFTER)) > 0
    assert segment_breach(BEFORE, AFTER)


def test_a_command_cannot_jump_through_the_obstacle() -> None:
    sup = PositionSupervisor(LOOSE, SOFT, kinematics=KINEMATICS)
    out, verdict = sup.filter(obs(BEFORE), AFTER.astype(np.float32))
    assert verdict.checks & SafetyCheck.OBSTACLE
    assert verdict.source is ActionSource.CLIPPED
    assert segment_breach(BEFORE, out) == []
    assert isinstance(verdict, PositionVerdict)
    assert verdict.moved_by(SafetyCheck.OBSTACLE) > 0.1
    # backed off along the segment, not frozen: it still moves toward the command
    assert out[0] > BEFORE[0] + 0.1


def test_checking_only_the_end_pose_lets_it_through() -> None:
    """The guard is needed: one sample per segment (the end) passes the jump."""
    sup = PositionSupervisor(
        LOOSE, SOFT, kinematics=KINEMATICS, config=PositionSupervisorConfig(sweep_max_samples=1)
    )
    out, verdict = sup.filter(obs(BEFORE), AFTER.astype(np.float32))
    assert not verdict.checks & SafetyCheck.OBSTACLE
    assert segment_breach(BEFORE, out)


def test_an_arm_inside_the_margin_may_leave_it() -> None:
    inside = np.array([0.0, *PITCH])
    assert clearances(inside)[0] < 0
    sup = PositionSupervisor(LOOSE, SOFT, kinematics=KINEMATICS)
    away = np.array([-1.2, *PITCH], dtype=np.float32)
    _, verdict = sup.filter(obs(inside), away)
    assert not verdict.checks & SafetyCheck.OBSTACLE


@pytest.mark.parametrize("compiled", [True, False])
def test_an_arm_inside_the_margin_that_would_be_held_there_is_brought_out(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At rest inside the obstacle's margin (a hand left it there), the arm's command held
    where it is: no better than the pose, so the supervisor moves it along the way out
    (``kernel.RETREAT_RAD`` a step, inside the rate limits), step after step, until the
    arm is clear. With no way out taken (a step of 0, the Python path) the command stays
    where the arm is, inside the margin."""
    inside = np.array([0.0, *PITCH])
    sup = PositionSupervisor(LIMITS, ARM_IMPEDANCE, kinematics=KINEMATICS, compiled=compiled)
    held = inside.astype(np.float32)
    gained = []
    for step in range(3):
        out, verdict = sup.filter(obs(inside), held, held)
        assert step or verdict.checks & SafetyCheck.OBSTACLE  # then the rate limits carry it on
        assert segment_breach(inside, out) == []
        gained.append(clearances(out.astype(np.float64))[0] - clearances(inside)[0])
        held = out
    assert 0.0 < gained[0] < gained[1] < gained[2]
    monkeypatch.setattr(kernel, "RETREAT_RAD", 0.0)
    stay = PositionSupervisor(LIMITS, ARM_IMPEDANCE, kinematics=KINEMATICS, compiled=False)
    held = inside.astype(np.float32)
    out, _ = stay.filter(obs(inside), held, held)
    assert out.tobytes() == held.tobytes()


@pytest.mark.parametrize("compiled", [True, False])
def test_with_the_way_out_off_a_held_command_stays_where_the_arm_is(compiled: bool) -> None:
    """``way_out=False`` (``supervision.way_out``): the arm inside the margin is held, the
    command moved by nothing but a command, at every step."""
    inside = np.array([0.0, *PITCH])
    config = PositionSupervisorConfig(way_out=False)
    sup = PositionSupervisor(
        LIMITS, ARM_IMPEDANCE, kinematics=KINEMATICS, config=config, compiled=compiled
    )
    assert sup.compiled == compiled
    held = inside.astype(np.float32)
    for _ in range(3):
        out, verdict = sup.filter(obs(inside), held, held)
        assert verdict.checks & SafetyCheck.OBSTACLE  # the breach is seen, and held
        assert out.tobytes() == held.tobytes()


@st.composite
def poses(draw: st.DrawFn, margin: float = 0.0) -> np.ndarray:
    f = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=N, max_size=N)))
    return LOW + margin + f * (HIGH - LOW - 2 * margin)


# Poses inside the hard range: outside it, the range outranks the Cartesian margins
# (test_the_hard_range_outranks_the_workspace_margin).
HARD = max(LIMITS.hard_margin_rad) + 1e-6


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(poses(HARD), poses(), st.booleans())
def test_every_executed_segment_is_clear_or_no_worse(
    q: np.ndarray, target: np.ndarray, loose: bool
) -> None:
    """Any pose, any command: the arm preset's supervisor (and one whose joint limits
    allow any jump) only ever commands segments that stay clear or improve."""
    sup = (
        PositionSupervisor(LOOSE, SOFT, kinematics=KINEMATICS)
        if loose
        else PositionSupervisor(LIMITS, ARM_IMPEDANCE, kinematics=KINEMATICS)
    )
    start = obs(q)[:N].astype(np.float64)
    out, verdict = sup.filter(obs(q), target.astype(np.float32))
    assert np.isfinite(out).all()
    assert segment_breach(start, out, samples=100) == []
    again, second = sup.filter(obs(q), out)
    assert again.tobytes() == out.tobytes()
    assert second.source is ActionSource.POLICY
    assert verdict.source in (ActionSource.POLICY, ActionSource.CLIPPED)


def test_the_hard_range_outranks_the_workspace_margin() -> None:
    """A joint beyond its hard range is brought back inside even where that takes the
    end effector deeper into the workspace margin."""
    q = np.array([-2.6, 1.821875, 1.725, -1.6])
    sup = PositionSupervisor(LIMITS, ARM_IMPEDANCE, kinematics=KINEMATICS)
    out, verdict = sup.filter(obs(q), q.astype(np.float32))
    hard = np.asarray(LIMITS.hard_margin_rad)
    assert np.all((out >= LOW + hard) & (out <= HIGH - hard))
    assert verdict.checks & SafetyCheck.POSITION
    assert clearances(out)[1] < clearances(q)[1] < 0
