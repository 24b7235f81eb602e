"""The declared deceleration limits are achievable: the brake they imply fits the motors."""

from __future__ import annotations

import itertools

import mujoco
import numpy as np

from tether.sim import arm_spec
from tether.sim.geometry import ARM
from tether.sim.mjcf import build_model, set_payload


def _worst_torque_ratio(decel: np.ndarray, samples: int, seed: int) -> float:
    """Largest |brake torque| / rated torque over fresh states of the rated envelope."""
    spec = arm_spec()
    model = build_model()
    model.dof_damping[:] = 0.0
    model.dof_frictionloss[:] = 0.0
    data = mujoco.MjData(model)
    rated = ARM.rated_min_actuator_gain * np.array(spec.torque_limit_nm)
    low, high = np.array(spec.joint_position_low_rad), np.array(spec.joint_position_high_rad)
    vmax = np.array(spec.joint_velocity_limit_rad_s)
    rng = np.random.default_rng(seed)
    mass = np.zeros((model.nv, model.nv))
    worst = 0.0
    for payload in (0.0, ARM.rated_max_payload_kg):
        set_payload(model, payload)
        for _ in range(samples):
            q = rng.uniform(low, high)
            # Speeds biased towards the limit, where the coupling is strongest.
            speed = np.sqrt(rng.uniform(0.0, 1.0, spec.n_joints)) * vmax
            for signs in itertools.product((-1.0, 1.0), repeat=spec.n_joints):
                data.qpos[:] = q
                data.qvel[:] = np.array(signs) * speed
                mujoco.mj_forward(model, data)
                mujoco.mj_fullM(model, data, mass)
                torque = mass @ (-np.array(signs) * decel) + data.qfrc_bias
                worst = max(worst, float(np.max(np.abs(torque) / rated)))
    return worst


def test_declared_deceleration_fits_the_weakest_rated_motors() -> None:
    decel = np.array(arm_spec().joint_acceleration_limit_rad_s2)
    assert _worst_torque_ratio(decel, samples=200, seed=12345) <= 1.0


def test_twice_the_declared_deceleration_would_not_fit() -> None:
    # The check above can fail: a braking claim that is too bold needs more torque
    # than the motors have somewhere in the envelope.
    decel = 2.0 * np.array(arm_spec().joint_acceleration_limit_rad_s2)
    assert _worst_torque_ratio(decel, samples=50, seed=7) > 1.0


def test_braking_at_the_declared_rate_stops_the_arm_in_time() -> None:
    spec = arm_spec()
    decel = np.array(spec.joint_acceleration_limit_rad_s2)
    model = build_model()
    set_payload(model, ARM.rated_max_payload_kg)
    model.actuator_gear[:, 0] *= ARM.rated_min_actuator_gain
    data = mujoco.MjData(model)
    mass = np.zeros((model.nv, model.nv))
    gear = model.actuator_gear[:, 0]
    v0 = 0.9 * np.array(spec.joint_velocity_limit_rad_s) * np.array([1, -1, 1, -1])
    data.qpos[:] = [0.0, 0.8, 1.0, 0.0]
    data.qvel[:] = v0
    dt = model.opt.timestep
    stop_steps = int(np.ceil(np.max(np.abs(v0) / decel) / dt)) + 5
    for _ in range(stop_steps):
        mujoco.mj_forward(model, data)
        mujoco.mj_fullM(model, data, mass)
        # Decelerate each joint at its declared rate, but no further than to a stop.
        want = -np.sign(data.qvel) * np.minimum(decel, np.abs(data.qvel) / dt)
        torque = mass @ want + data.qfrc_bias - data.qfrc_passive
        ctrl = torque / gear
        assert np.all(np.abs(ctrl) <= 1.0 + 1e-9), ctrl
        data.ctrl[:] = ctrl
        mujoco.mj_step(model, data)
    np.testing.assert_allclose(data.qvel, 0.0, atol=0.05)
