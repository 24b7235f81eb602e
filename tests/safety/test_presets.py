"""The built-in arm's acceleration bound holds on the MuJoCo model it describes."""

from __future__ import annotations

import mujoco
import numpy as np

from tether.safety.presets import ARM_ACCELERATION_PER_ACTION_SCALE, arm_limits
from tether.sim import arm_spec
from tether.sim.geometry import ARM
from tether.sim.mjcf import build_model

# Domain randomization draws the actuator gain up to this (tether.sim.randomization).
MAX_ACTUATOR_GAIN = 1.1


def test_acceleration_per_action_bounds_the_arm_everywhere_in_its_range() -> None:
    limits = arm_limits()
    model = build_model(ARM)
    data = mujoco.MjData(model)
    torque = np.asarray(limits.action_scale_nm) * MAX_ACTUATOR_GAIN
    rng = np.random.default_rng(0)
    mass = np.zeros((model.nv, model.nv))
    worst = np.zeros(model.nv)
    for _ in range(300):
        data.qpos[:] = rng.uniform(limits.position_low_rad, limits.position_high_rad)
        mujoco.mj_forward(model, data)
        mujoco.mj_fullM(model, data, mass)
        # Every joint's acceleration when all joints push at full torque the worst way.
        worst = np.maximum(worst, np.abs(np.linalg.inv(mass)) @ torque)
    bound = np.asarray(limits.acceleration_per_action_rad_s2)
    assert np.all(worst <= bound), (worst, bound)
    # Why the bound is needed: the declared (guaranteed deceleration) limit understates
    # what a full action does by an order of magnitude on every joint.
    declared = np.asarray(arm_spec().joint_acceleration_limit_rad_s2)
    assert np.all(worst > 10 * declared)
    assert np.all(bound == ARM_ACCELERATION_PER_ACTION_SCALE * declared)
