"""The position-commanded arm: the impedance law the supervisor models is the one the
physics runs, drift shows up as tracking error, and unchecked commands really hurt."""

from __future__ import annotations

import warnings

import gymnasium as gym
import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from tether.sim import (
    ENV_ID,
    ArmDynamics,
    ArmEnv,
    ArmEnvConfig,
    ArmKinematics,
    DomainRandomization,
    DriftSchedule,
    arm_spec,
)
from tether.sim.controllers import ReachController
from tether.sim.dynamics import apply_dynamics
from tether.sim.episodes import run_episodes, success_rate
from tether.sim.mjcf import build_model
from tether.sim.spec import DEFAULT_COMMAND_INTERFACE

SPEC = arm_spec("position")
POSITION = ArmEnvConfig(command_interface="position")
WORN = DriftSchedule.demo().dynamics_at(10**9, ArmDynamics.nominal())


def test_position_env_passes_the_gymnasium_checker_without_warnings() -> None:
    env = gym.make(ENV_ID, seed=0, config=POSITION)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)
    assert env.unwrapped.robot_spec == SPEC


def test_position_spec_carries_the_impedance_gains_and_its_own_fingerprint() -> None:
    torque = arm_spec("torque")
    assert SPEC.command_interface == "position"
    assert SPEC.fingerprint() != torque.fingerprint()
    assert len(SPEC.joint_stiffness_nm_rad) == SPEC.n_joints
    assert all(k > 0 for k in SPEC.joint_stiffness_nm_rad)
    assert SPEC.joint_acceleration_limit_rad_s2 == torque.joint_acceleration_limit_rad_s2


@pytest.mark.parametrize("gain", [1.0, 0.6])
@pytest.mark.parametrize("error_rad", [0.05, 3.0])  # inside and far beyond saturation
def test_the_physics_applies_gain_times_the_saturated_impedance_torque(
    gain: float, error_rad: float
) -> None:
    """τ = G·clip(Kp (q_cmd − q) − Kd q̇ + g_nominal(q), ±τ_max), what the supervisor models."""
    model = build_model(command_interface="position")
    apply_dynamics(model, ArmDynamics(actuator_gain=gain, payload_mass_kg=0.5))
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    kin = ArmKinematics(SPEC)  # the nominal model: no payload
    kp, kd = np.array(SPEC.joint_stiffness_nm_rad), np.array(SPEC.joint_damping_nm_s_rad)
    limit = np.array(SPEC.torque_limit_nm)
    for _ in range(20):
        q = rng.uniform(SPEC.joint_position_low_rad, SPEC.joint_position_high_rad)
        qd = rng.uniform(-1.0, 1.0, SPEC.n_joints)
        command = q + rng.choice([-1.0, 1.0], SPEC.n_joints) * error_rad
        data.qpos[:], data.qvel[:], data.ctrl[:] = q, qd, command
        mujoco.mj_forward(model, data)
        wanted = kp * (command - q) - kd * qd + kin.gravity_torque(q)
        expected = gain * np.clip(wanted, -limit, limit)
        # atol: the kinematics' gravity includes the empty payload body's 1e-6 kg.
        np.testing.assert_allclose(data.qfrc_actuator, expected, rtol=1e-6, atol=1e-4)


def test_commanding_the_measured_pose_holds_the_nominal_arm_still() -> None:
    env = ArmEnv(seed=0, config=POSITION)
    obs, _ = env.reset(seed=0)
    start = env.true_state().joint_position_rad
    hold = SPEC.action_for_position(obs[:4]).astype(np.float32)
    for _ in range(50):
        env.step(hold)
    np.testing.assert_allclose(env.true_state().joint_position_rad, start, atol=1e-4)


def test_encoder_bias_moves_where_the_arm_goes_not_what_it_reads() -> None:
    """The controller tracks its readings: a biased encoder shifts the true pose by −bias."""
    env = ArmEnv(seed=0, config=POSITION, dynamics=ArmDynamics(obs_bias=0.05))
    env.reset(seed=0)
    goal = np.array(SPEC.home_position_rad)
    action = SPEC.action_for_position(goal).astype(np.float32)
    for _ in range(100):
        obs, *_ = env.step(action)
    # Within the friction dead band, friction / stiffness = 0.01 · 0.5 rad.
    np.testing.assert_allclose(obs[:4], goal, atol=6e-3)
    np.testing.assert_allclose(env.true_state().joint_position_rad, goal - 0.05, atol=6e-3)


def test_the_episode_outcome_is_settled_success_and_final_distance() -> None:
    env = ArmEnv(seed=0, config=ArmEnvConfig(command_interface="position", episode_steps=30))
    controller = ReachController(SPEC)
    obs, _ = env.reset(seed=1)
    info: dict[str, object] = {}
    for _ in range(30):
        obs, _, _, truncated, info = env.step(controller.act(obs))
        if not truncated:
            assert "outcome" not in info
    outcome = info["outcome"]
    assert outcome == env.episode_outcome()
    assert outcome.steps == 30
    assert outcome.final_distance_m == info["distance_m"]
    assert outcome.success == (outcome.settled_steps >= POSITION.settle_steps)


def _reach(dynamics: ArmDynamics, oracle: bool, episodes: int) -> tuple[float, float]:
    env = ArmEnv(dynamics=dynamics, seed=0, config=POSITION)
    controller = ReachController(SPEC, dynamics=dynamics if oracle else None)
    outcomes = run_episodes(env, controller.act, range(episodes), reset=controller.reset)
    return success_rate(outcomes), float(np.median([o.final_distance_m for o in outcomes]))


def test_demo_drift_defeats_the_nominal_controller_and_not_the_oracle() -> None:
    """Small-scale frozen/oracle gap (benchmarks/bench_task.py measures it on 100 tasks)."""
    nominal, _ = _reach(ArmDynamics.nominal(), oracle=False, episodes=12)
    frozen, frozen_distance = _reach(WORN, oracle=False, episodes=12)
    oracle, _ = _reach(WORN, oracle=True, episodes=12)
    assert nominal >= 0.9
    assert frozen <= 0.5 * nominal
    assert oracle >= 0.9 * nominal
    assert frozen_distance > 0.05  # the median frozen episode ends outside the radius


def test_pretraining_randomization_does_not_cover_the_demo_drift() -> None:
    randomization = DomainRandomization.default()
    assert not randomization.contains(WORN)
    for knob in ("actuator_gain", "joint_friction", "payload_mass_kg", "action_delay_steps"):
        low, high = getattr(randomization, knob)
        assert not low <= getattr(WORN, knob) <= high, knob


@pytest.mark.parametrize("dynamics", [ArmDynamics.nominal(), WORN], ids=["nominal", "worn"])
def test_unchecked_random_commands_hit_joint_limits_and_the_obstacle(
    dynamics: ArmDynamics,
) -> None:
    """Without a supervisor, uniformly random commands (each held 0.2 s) really do harm:
    MuJoCo counts joint-limit violations and obstacle contacts (the with-supervisor half
    of this test asserts 0 of each)."""
    env = ArmEnv(dynamics=dynamics, seed=0, config=POSITION)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    contacts = limits = 0
    action = np.zeros(SPEC.act_dim, dtype=np.float32)
    for step in range(4000):
        if step % 10 == 0:
            action = rng.uniform(-1.0, 1.0, SPEC.act_dim).astype(np.float32)
        _, _, _, truncated, info = env.step(action)
        contacts += info["obstacle_contact"]
        limits += info["joint_limit_violation"]
        if truncated:
            env.reset()
    assert contacts > 0
    assert limits > 0


def test_the_default_interface_is_the_one_arm_spec_and_the_env_give() -> None:
    assert ArmEnv(seed=0).robot_spec == arm_spec() == arm_spec(DEFAULT_COMMAND_INTERFACE)


def test_the_observation_reports_the_command_received_and_its_change() -> None:
    env = ArmEnv(seed=0, config=POSITION)
    lay = SPEC.layout.slices()
    obs, _ = env.reset(seed=2)
    # At reset the arm holds where it is: the command is the pose, unchanged.
    np.testing.assert_allclose(obs[lay["command"]], obs[lay["joint_position"]], atol=1e-6)
    np.testing.assert_array_equal(obs[lay["command_change"]], np.zeros(SPEC.n_joints))
    first = np.full(SPEC.act_dim, 0.1, dtype=np.float32)
    second = np.full(SPEC.act_dim, 0.12, dtype=np.float32)
    obs, *_ = env.step(first)
    np.testing.assert_allclose(obs[lay["command"]], SPEC.commanded_position(first), atol=1e-6)
    before = obs[lay["command"]].astype(np.float64)
    obs, *_ = env.step(second)
    np.testing.assert_allclose(
        obs[lay["command_change"]], SPEC.commanded_position(second) - before, atol=1e-6
    )
    assert arm_spec("torque").layout.command is None
    assert arm_spec("torque").obs_dim == 2 * SPEC.n_joints + 6


def test_the_scripted_controller_keeps_within_the_supervisors_limits() -> None:
    """The teacher of the shipped policy moves at a margin below the rate limits and
    around the obstacle: the supervisor passes every one of its steps on the nominal arm,
    and it settles on every target."""
    from tether.safety.for_spec import supervisor_for

    env = ArmEnv(seed=0, config=POSITION)
    controller = ReachController(SPEC)
    corrected = steps = 0
    successes = []
    for episode in range(12):
        obs, _ = env.reset(seed=episode)
        controller.reset()
        supervisor = supervisor_for(SPEC)
        previous = None
        done = False
        while not done:
            action, verdict = supervisor.filter(obs, controller.act(obs), previous)
            previous = action
            corrected += verdict.intervened
            steps += 1
            obs, _, _, done, info = env.step(action)
        successes.append(info["outcome"].success)
    assert corrected == 0, f"{corrected} of {steps} steps corrected"
    assert all(successes)
