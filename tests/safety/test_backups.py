"""Backups: hold damps to standstill where the arm is, brake stops fast, go_home goes home.

Run in closed loop on the supervisor's model with gravity, through the supervisor (as
in production), at the weakest and the fastest gain the limits allow.
"""

from __future__ import annotations

import numpy as np
import pytest

from safety.builders import PlanarArm, observation, planar_limits, step_model
from tether.safety import BackupConfig, Supervisor, SupervisorConfig

LIMITS = planar_limits()
ARM = PlanarArm(gravity_nm=3.0)
SCALE = np.asarray(LIMITS.action_scale_nm)
GAINS = (LIMITS.braking_deceleration_rad_s2[0], LIMITS.acceleration_per_action_rad_s2[0])


def _run(kind: str, gain: float, q0: np.ndarray, v0: np.ndarray, steps: int) -> np.ndarray:
    """Joint positions and velocities over time, shape (steps, 4)."""
    supervisor = Supervisor(
        LIMITS, kinematics=ARM, config=SupervisorConfig(backup=BackupConfig(kind=kind))
    )
    q, v = q0.copy(), v0.copy()
    previous: np.ndarray | None = None
    trace = []
    for _ in range(steps):
        u, _ = supervisor.backup_action(observation(LIMITS, q, v, size=10), previous)
        previous = u
        q, v = step_model(LIMITS, q, v, u, np.full(2, gain), ARM.gravity_torque(q) / SCALE)
        trace.append(np.concatenate([q, v]))
    return np.asarray(trace)


@pytest.mark.parametrize("gain", GAINS)
def test_hold_damps_to_standstill_near_where_the_arm_was(gain: float) -> None:
    q0 = np.array([0.4, -0.3])
    trace = _run("hold", gain, q0, np.array([0.3, -0.2]), steps=400)
    q_end, v_end = trace[-1, :2], trace[-1, 2:]
    assert np.all(np.abs(v_end) < 1e-3)
    # It stops after a short coast, nowhere near "zero positions".
    assert np.all(np.abs(q_end - q0) < 0.2)
    assert np.linalg.norm(q_end) > 0.3


@pytest.mark.parametrize("gain", GAINS)
def test_hold_at_rest_is_exactly_gravity_compensation(gain: float) -> None:
    q = np.array([0.4, -0.3])
    supervisor = Supervisor(LIMITS, kinematics=ARM)
    u, _ = supervisor.backup_action(observation(LIMITS, q, np.zeros(2), size=10))
    np.testing.assert_allclose(u, ARM.gravity_torque(q) / SCALE, rtol=1e-5)
    assert np.all(u != 0)


def test_brake_stops_sooner_than_hold() -> None:
    q0, v0 = np.array([0.0, 0.0]), np.array([1.5, -1.5])
    gain = GAINS[0]

    def steps_to_stop(kind: str) -> int:
        speeds = np.abs(_run(kind, gain, q0, v0, steps=400)[:, 2:]).max(axis=1)
        return int(np.argmax(speeds < 0.05))

    assert 0 < steps_to_stop("brake") < steps_to_stop("hold")


@pytest.mark.parametrize("gain", GAINS)
def test_go_home_reaches_home_slowly(gain: float) -> None:
    # Start clear of the obstacle: (1.2, -1.0) overlaps it by 7 cm, where the obstacle
    # check (rightly) stops the go-home's fast-gain reversal, and the load estimate then
    # learns from that stop (see docs/safety.md, "What the model does not cover").
    trace = _run("go_home", gain, np.array([-1.2, 1.0]), np.zeros(2), steps=1500)
    home = np.asarray(LIMITS.home_position_rad)
    assert np.all(np.abs(trace[-1, :2] - home) < 0.02)
    speed_cap = 0.2 * np.asarray(LIMITS.velocity_limit_rad_s)
    assert np.all(np.abs(trace[:, 2:]) <= speed_cap + 0.05)


# The true robot needs this much extra torque to hold still (normalized): a payload the
# kinematics does not know about.
UNMODELLED_LOAD = np.array([-0.15, 0.1])


def _hold_under_load(estimation_gain: float, gain: float) -> np.ndarray:
    supervisor = Supervisor(
        LIMITS,
        kinematics=PlanarArm(),
        config=SupervisorConfig(load_estimation_gain=estimation_gain),
    )
    q, v = np.array([0.4, -0.3]), np.zeros(2)
    previous: np.ndarray | None = None
    for _ in range(600):
        u, _ = supervisor.backup_action(observation(LIMITS, q, v, size=10), previous)
        previous = u
        q, v = step_model(LIMITS, q, v, u, np.full(2, gain), UNMODELLED_LOAD)
    return np.concatenate([q, v])


@pytest.mark.parametrize("gain", GAINS)
def test_hold_learns_an_unmodelled_load_and_stays_put(gain: float) -> None:
    end = _hold_under_load(0.5, gain)
    assert np.all(np.abs(end[2:]) < 1e-3)
    assert np.all(np.abs(end[:2] - np.array([0.4, -0.3])) < 0.1)
    # Without the load estimate the same hold creeps away under the load.
    creeping = _hold_under_load(0.0, gain)
    assert np.max(np.abs(creeping[:2] - np.array([0.4, -0.3]))) > 0.3


def _held_after_one_fast_stop(learning_speed_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """The hold at rest after the supervisor held a fast, load-free joint once at the
    weakest gain (which leaves most of its speed: not a load), and a fresh supervisor's
    hold at the same pose."""
    supervisor = Supervisor(
        LIMITS,
        kinematics=PlanarArm(),
        config=SupervisorConfig(load_learning_speed_fraction=learning_speed_fraction),
    )
    q, v = np.array([0.4, -0.3]), 0.8 * np.asarray(LIMITS.velocity_limit_rad_s)
    u, _ = supervisor.backup_action(observation(LIMITS, q, v, size=10))
    gravity = PlanarArm().gravity_torque(q) / SCALE
    q, v = step_model(LIMITS, q, v, u, np.full(2, GAINS[0]), gravity)
    supervisor.backup_action(observation(LIMITS, q, v, size=10), u)
    at_rest = observation(LIMITS, q, np.zeros(2), size=10)
    held, _ = supervisor.backup_action(at_rest)
    fresh, _ = Supervisor(LIMITS, kinematics=PlanarArm()).backup_action(at_rest)
    return held, fresh


def test_a_stop_of_a_fast_joint_teaches_no_load() -> None:
    held, fresh = _held_after_one_fast_stop(0.25)
    assert np.array_equal(held, fresh)
    # Learning from every stop takes the speed the weak gain left for a load.
    held, fresh = _held_after_one_fast_stop(1.0)
    assert np.max(np.abs(held - fresh)) > 0.05
