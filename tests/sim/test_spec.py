"""arm_spec() declares exactly what the MuJoCo model simulates."""

from __future__ import annotations

import mujoco
import numpy as np

from tether.sim import ArmKinematics, arm_spec
from tether.sim.mjcf import build_model
from tether.spec import RobotSpec, Sphere


def test_spec_limits_are_the_models_limits() -> None:
    spec = arm_spec()
    model = build_model()
    names = tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(model.njnt))
    assert names == spec.joint_names
    np.testing.assert_array_equal(model.jnt_range[:, 0], spec.joint_position_low_rad)
    np.testing.assert_array_equal(model.jnt_range[:, 1], spec.joint_position_high_rad)
    np.testing.assert_array_equal(model.actuator_gear[:, 0], spec.torque_limit_nm)
    assert np.all(model.jnt_limited)
    assert spec.control_period_s == 0.02
    extra = 2 * spec.n_joints if spec.command_interface == "position" else 0
    assert spec.obs_dim == 2 * spec.n_joints + 6 + extra
    assert RobotSpec.from_dict(spec.to_dict()) == spec


def test_obstacle_is_the_models_obstacle_and_home_is_clear_of_it() -> None:
    spec = arm_spec()
    model = build_model()
    geom = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "obstacle")
    (obstacle,) = spec.obstacles
    assert isinstance(obstacle, Sphere)
    np.testing.assert_array_equal(model.geom_pos[geom], obstacle.center)
    assert model.geom_size[geom][0] == obstacle.radius
    centers, radii = ArmKinematics().collision_spheres(np.array(spec.home_position_rad))
    clearance = np.linalg.norm(centers - obstacle.center, axis=1) - radii - obstacle.radius
    assert clearance.min() > 0.02
    assert spec.workspace.contains(centers.min(axis=0))
    assert spec.workspace.contains(centers.max(axis=0))
