"""The built-in arm's presets hold on the MuJoCo model and the tasks they describe."""

from __future__ import annotations

import mujoco
import numpy as np

from tether.safety.presets import (
    ARM_ACCELERATION_PER_ACTION_SCALE,
    ARM_OBSTACLE_MARGIN_M,
    arm_limits,
)
from tether.sim import ArmEnvConfig, arm_spec
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


def test_the_arms_targets_lie_beyond_the_supervisors_obstacle_margin() -> None:
    """A target whose pose is inside (or on) the supervisor's obstacle margin is a task
    no supervised arm settles on: the sampler keeps its gap beyond it."""
    clearance = ArmEnvConfig().target_obstacle_clearance_m
    assert clearance >= ARM_OBSTACLE_MARGIN_M + 0.01
    assert arm_limits().obstacle_margin_m == ARM_OBSTACLE_MARGIN_M
