"""ArmEnv: a valid gymnasium env whose reported violations are the physics' own."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from tether.sim import (
    ENV_ID,
    ArmDynamics,
    ArmEnv,
    ArmKinematics,
    DomainRandomization,
    SimConfigError,
    SimError,
    arm_spec,
)
from tether.sim.config import ArmEnvConfig as _EnvConfig

# The torque interface's task (the arm's second command interface).
TORQUE = _EnvConfig(command_interface="torque")

SPEC = arm_spec()
LAY = SPEC.layout.slices()


def test_registered_env_passes_the_gymnasium_checker_without_warnings() -> None:
    env = gym.make(ENV_ID, seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []
    assert env.observation_space.shape == (SPEC.obs_dim,)
    assert env.action_space.shape == (SPEC.act_dim,)


def _rollout(env: ArmEnv, seed: int, steps: int) -> list[tuple[np.ndarray, float, bool]]:
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    out = []
    for _ in range(steps):
        obs, reward, _, truncated, info = env.step(
            rng.uniform(-1, 1, SPEC.act_dim).astype(np.float32)
        )
        out.append((obs, reward, info["obstacle_contact"]))
        if truncated:
            env.reset()
    return out


def test_same_seed_same_trajectory_even_with_randomization_and_noise() -> None:
    def make() -> ArmEnv:
        return ArmEnv(config=TORQUE, randomization=DomainRandomization.default())

    a, b, c = _rollout(make(), 3, 450), _rollout(make(), 3, 450), _rollout(make(), 4, 450)
    for (oa, ra, ca), (ob, rb, cb) in zip(a, b, strict=True):
        np.testing.assert_array_equal(oa, ob)
        assert (ra, ca) == (rb, cb)
    assert not np.array_equal(a[-1][0], c[-1][0])


def test_random_policy_hits_obstacle_and_limits_and_info_matches_the_physics() -> None:
    # The safety layer's physics test relies on this: without a supervisor, a random
    # policy really does collide and leave its limits.
    env = ArmEnv(config=TORQUE, seed=11)
    kin = ArmKinematics()
    rng = np.random.default_rng(11)
    env.reset(seed=11)
    vlim = np.array(SPEC.joint_velocity_limit_rad_s)
    totals = np.zeros(3, dtype=int)
    for _ in range(3000):
        obs, _, terminated, truncated, info = env.step(rng.uniform(-1, 1, 4).astype(np.float32))
        state = env.true_state()
        assert not terminated
        assert info["velocity_limit_violation"] == bool(
            np.any(np.abs(state.joint_velocity_rad_s) > vlim)
        )
        if not (
            (state.joint_position_rad >= SPEC.joint_position_low_rad).all()
            and (state.joint_position_rad <= SPEC.joint_position_high_rad).all()
        ):
            assert info["joint_limit_violation"]
        np.testing.assert_allclose(
            kin.end_effector(state.joint_position_rad), state.end_effector_m, atol=1e-12
        )
        np.testing.assert_allclose(obs[LAY["end_effector"]], state.end_effector_m, atol=1e-6)
        np.testing.assert_allclose(obs[LAY["joint_position"]], state.joint_position_rad, atol=1e-6)
        assert info["distance_m"] == pytest.approx(
            np.linalg.norm(state.end_effector_m - state.target_m)
        )
        totals += (
            info["obstacle_contact"],
            info["joint_limit_violation"],
            info["velocity_limit_violation"],
        )
        if truncated:
            assert info["episode_step"] == 200
            env.reset()
    contacts, limits, speeds = totals
    assert contacts > 0
    assert limits > 0
    assert speeds > 0


def _pose_inside_obstacle() -> np.ndarray:
    kin = ArmKinematics()
    (obstacle,) = SPEC.obstacles
    for shoulder in np.linspace(0.0, 1.9, 40):
        for elbow in np.linspace(-0.3, 2.4, 40):
            q = np.array([0.0, shoulder, elbow, 0.0])
            centers, _ = kin.collision_spheres(q)
            # The spheres are 25 % fatter than the links, so ask for real overlap.
            if (np.linalg.norm(centers - obstacle.center, axis=1) - obstacle.radius).min() < 0:
                return q
    raise AssertionError("no pose puts the arm through the obstacle")


def test_contact_and_limit_flags_come_from_the_physics_state() -> None:
    env = ArmEnv(config=TORQUE, seed=0)
    hold = np.zeros(4, dtype=np.float32)
    env.reset(options={"joint_position": SPEC.home_position_rad})
    _, _, _, _, info = env.step(hold)
    assert not info["obstacle_contact"]
    assert not info["joint_limit_violation"]
    env.reset(options={"joint_position": _pose_inside_obstacle()})
    _, _, _, _, info = env.step(hold)
    assert info["obstacle_contact"]
    assert info["obstacle_contact_steps"] == 1
    beyond = np.array(SPEC.home_position_rad)
    beyond[3] = SPEC.joint_position_high_rad[3] + 0.2
    env.reset(options={"joint_position": beyond})
    _, _, _, _, info = env.step(hold)
    assert info["joint_limit_violation"]


def test_holding_against_gravity_at_the_target_earns_the_success_bonus() -> None:
    env = ArmEnv(config=TORQUE, seed=0)
    kin = ArmKinematics()
    q = np.array([0.5, 0.9, 1.1, -0.3])
    env.reset(options={"joint_position": q, "target": kin.end_effector(q)})
    for _ in range(10):
        action = kin.gravity_torque(env.true_state().joint_position_rad) / SPEC.torque_limit_nm
        _, reward, _, _, info = env.step(action.astype(np.float32))
    assert info["success"]
    assert info["distance_m"] < 0.01
    assert reward > 0.9


def test_targets_are_reachable_and_clear_of_the_obstacle() -> None:
    env = ArmEnv(config=TORQUE, seed=5)
    (obstacle,) = SPEC.obstacles
    for episode in range(40):
        obs, _ = env.reset(seed=episode)
        target = obs[LAY["target"]]
        assert np.linalg.norm(target - obstacle.center) > obstacle.radius + 0.05
        assert SPEC.workspace.contains(target)
        assert target[2] >= 0.05


def test_sensor_bias_noise_and_action_delay_are_applied() -> None:
    env = ArmEnv(config=TORQUE, dynamics=ArmDynamics(obs_bias=0.05, action_delay_steps=1), seed=0)
    env.reset()
    obs, *_ = env.step(np.zeros(4, dtype=np.float32))
    true = env.true_state()
    np.testing.assert_allclose(
        obs[LAY["joint_position"]], true.joint_position_rad + 0.05, atol=1e-6
    )
    first = np.full(4, 0.5, dtype=np.float32)
    *_, info = env.step(first)
    np.testing.assert_array_equal(info["executed_action"], np.zeros(4))
    *_, info = env.step(np.zeros(4, dtype=np.float32))
    np.testing.assert_array_equal(info["executed_action"], first)
    env.set_dynamics(ArmDynamics(obs_noise_std=0.01))
    obs, *_ = env.step(np.zeros(4, dtype=np.float32))
    error = obs[: 2 * SPEC.n_joints] - np.concatenate(
        [env.true_state().joint_position_rad, env.true_state().joint_velocity_rad_s]
    )
    assert 0 < np.abs(error).max() < 0.1
    np.testing.assert_allclose(
        env.true_observation()[LAY["end_effector"]], obs[LAY["end_effector"]], atol=1e-6
    )


def test_set_dynamics_changes_the_physics_live() -> None:
    # Same state, same command, weaker motors: the arm must move less.
    def shoulder_speed(gain: float) -> float:
        env = ArmEnv(config=TORQUE, seed=0)
        env.reset(options={"joint_position": SPEC.home_position_rad})
        env.set_dynamics(ArmDynamics(actuator_gain=gain))
        *_, info = env.step(np.array([0, -1, 0, 0], dtype=np.float32))
        assert info["dynamics"].actuator_gain == gain
        return float(env.true_state().joint_velocity_rad_s[1])

    assert shoulder_speed(0.5) > shoulder_speed(1.0)


def test_an_external_torque_moves_a_held_arm_until_taken_away() -> None:
    """A hand on the position-commanded arm: held at home, the arm leaves its command
    while the torque lasts, comes back once it is taken away, and a reset clears it."""
    env = ArmEnv(config=_EnvConfig(command_interface="position"), seed=0)
    home = np.asarray(SPEC.home_position_rad)
    env.reset(options={"joint_position": home})
    hold = np.asarray(env.robot_spec.action_for_position(home), dtype=np.float32)

    def offset(steps: int) -> float:
        for _ in range(steps):
            env.step(hold)
        return float(np.abs(env.true_state().joint_position_rad - home).max())

    still = offset(50)
    env.set_external_torque([0.0, 8.0, 0.0, 0.0])
    pushed = offset(50)
    assert pushed > still + 0.05
    env.set_external_torque(None)
    assert offset(100) < still + 0.01
    env.set_external_torque([0.0, 8.0, 0.0, 0.0])
    env.reset(options={"joint_position": home})
    assert offset(50) < still + 0.01
    with pytest.raises(SimConfigError, match="finite torque of shape"):
        env.set_external_torque([0.0, np.inf, 0.0, 0.0])
    with pytest.raises(SimConfigError, match="finite torque of shape"):
        env.set_external_torque([1.0, 2.0])


def test_bad_actions_and_options_are_refused_with_a_reason() -> None:
    env = ArmEnv(config=TORQUE, seed=0)
    env.reset()
    with pytest.raises(SimError, match="finite action of shape"):
        env.step(np.array([np.nan, 0, 0, 0], dtype=np.float32))
    with pytest.raises(SimError, match="shape"):
        env.step(np.zeros(3, dtype=np.float32))
    with pytest.raises(SimConfigError, match="unknown"):
        env.reset(options={"joint_positions": [0, 0, 0, 0]})
    with pytest.raises(SimConfigError, match="target"):
        env.reset(options={"target": [0.0, 0.0]})
    with pytest.raises(SimConfigError, match="render_mode"):
        ArmEnv(render_mode="human")
