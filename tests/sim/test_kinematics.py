"""ArmKinematics agrees with MuJoCo's own forward pass, covers the arm, and holds it up."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tether.sim import ArmKinematics, SimConfigError, arm_spec
from tether.sim.geometry import ARM
from tether.sim.kinematics import SPHERE_INFLATION
from tether.sim.mjcf import END_EFFECTOR_SITE, build_model, set_payload
from tether.spec import ObservationLayout, RobotSpec

SPEC = arm_spec()
LOW = np.array(SPEC.joint_position_low_rad)
HIGH = np.array(SPEC.joint_position_high_rad)
KIN = ArmKinematics(SPEC)

joint_positions = st.lists(
    st.floats(0.0, 1.0, allow_nan=False), min_size=SPEC.n_joints, max_size=SPEC.n_joints
).map(lambda u: LOW + np.array(u) * (HIGH - LOW))


@settings(max_examples=50, deadline=None)
@given(q=joint_positions)
def test_end_effector_matches_a_full_forward_pass(q: np.ndarray) -> None:
    model = build_model()
    data = mujoco.MjData(model)
    data.qpos[:] = q
    mujoco.mj_forward(model, data)
    site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, END_EFFECTOR_SITE)
    np.testing.assert_allclose(KIN.end_effector(q), data.site_xpos[site], atol=1e-12)


def _worst_gap(q: np.ndarray, centers: np.ndarray, radii: np.ndarray, seed: int) -> float:
    """How far the surface point of the arm least covered by the spheres lies outside them (m)."""
    model = build_model()
    data = mujoco.MjData(model)
    data.qpos[:] = q
    mujoco.mj_kinematics(model, data)
    rng = np.random.default_rng(seed)
    worst = -np.inf
    for link in ARM.links:
        geom = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, f"{link.name}_geom")
        # Points on the capsule's surface: a point on its axis plus a radius in any direction.
        axis_z = np.clip(
            rng.uniform(-link.radius_m, link.length_m + link.radius_m, 300), 0.0, link.length_m
        )
        direction = rng.normal(size=(300, 3))
        direction /= np.linalg.norm(direction, axis=1, keepdims=True)
        local = np.stack([np.zeros(300), np.zeros(300), axis_z], axis=1) + link.radius_m * direction
        rot = data.geom_xmat[geom].reshape(3, 3)
        # MuJoCo centres the capsule's frame at mid-length; ours starts at the joint.
        world = data.geom_xpos[geom] + (local - [0.0, 0.0, link.length_m / 2]) @ rot.T
        gaps = np.linalg.norm(world[:, None, :] - centers[None, :, :], axis=2) - radii
        worst = max(worst, float(gaps.min(axis=1).max()))
    return worst


@settings(max_examples=40, deadline=None)
@given(q=joint_positions, seed=st.integers(0, 2**31))
def test_every_point_of_every_link_lies_in_a_collision_sphere(q: np.ndarray, seed: int) -> None:
    centers, radii = KIN.collision_spheres(q)
    assert centers.shape == (KIN.n_spheres, 3)
    assert radii.shape == (KIN.n_spheres,)
    assert _worst_gap(q, centers, radii, seed) <= 1e-9


def test_spheres_no_larger_than_the_links_would_leave_gaps() -> None:
    # The coverage check above can fail: spheres as thin as the capsules leave the
    # surface between neighbouring centres uncovered.
    q = np.array(SPEC.home_position_rad)
    centers, radii = KIN.collision_spheres(q)
    assert _worst_gap(q, centers, radii / SPHERE_INFLATION, seed=0) > 1e-3


@settings(max_examples=50, deadline=None)
@given(q=joint_positions)
def test_the_closed_form_places_every_sphere_and_the_end_effector_where_mujoco_does(
    q: np.ndarray,
) -> None:
    chain = KIN.planar_chain()
    assert chain is not None
    # PlanarChain's documented formula, written out here.
    yaw, start, theta = q[0], np.array([0.0, chain.base_height_m]), 0.0
    starts, directions = [], []
    for i, length in enumerate(chain.link_lengths_m):
        theta = theta + (q[i] if i else 0.0)
        direction = np.array([np.sin(theta), np.cos(theta)])
        starts.append(start)
        directions.append(direction)
        start = start + length * direction

    def world(link: int, offset: float) -> np.ndarray:
        r, z = starts[link] + offset * directions[link]
        return np.array([r * np.cos(yaw), r * np.sin(yaw), z])

    centers, radii = KIN.collision_spheres(q)
    mine = [world(k, o) for k, o in zip(chain.sphere_links, chain.sphere_offsets_m, strict=True)]
    np.testing.assert_allclose(np.array(mine), centers, atol=1e-12)
    np.testing.assert_array_equal(np.array(chain.sphere_radii_m), radii)
    end = world(len(chain.link_lengths_m) - 1, chain.end_effector_offset_m)
    np.testing.assert_allclose(end, KIN.end_effector(q), atol=1e-12)


def test_gravity_torque_holds_the_arm_still() -> None:
    model = build_model()
    model.dof_damping[:] = 0.0
    model.dof_frictionloss[:] = 0.0
    set_payload(model, 0.3)
    data = mujoco.MjData(model)
    kin = ArmKinematics(payload_mass_kg=0.3)
    q0 = np.array([0.4, 1.2, 0.9, -0.5])
    data.qpos[:] = q0
    gear = model.actuator_gear[:, 0]
    for _ in range(250):
        data.ctrl[:] = kin.gravity_torque(data.qpos.copy()) / gear
        mujoco.mj_step(model, data)
    np.testing.assert_allclose(data.qpos, q0, atol=1e-3)
    # Without the compensation the same arm falls: the check above can fail.
    data.qpos[:] = q0
    data.qvel[:] = 0.0
    data.ctrl[:] = 0.0
    mujoco.mj_step(model, data, nstep=250)
    assert np.abs(data.qpos - q0).max() > 0.1


def test_kinematics_refuses_another_robots_spec_and_bad_shapes() -> None:
    other = RobotSpec(
        name="other",
        joint_names=("a",),
        control_period_s=0.02,
        observation_names=tuple(f"o{i}" for i in range(8)),
        layout=ObservationLayout((0, 1), (1, 2), (2, 5), (5, 8)),
        joint_position_low_rad=(-1.0,),
        joint_position_high_rad=(1.0,),
        joint_velocity_limit_rad_s=(1.0,),
        joint_acceleration_limit_rad_s2=(1.0,),
        torque_limit_nm=(1.0,),
        home_position_rad=(0.0,),
        workspace=SPEC.workspace,
    )
    with pytest.raises(SimConfigError, match="built-in arm"):
        ArmKinematics(other)
    with pytest.raises(SimConfigError, match=r"shape \(4,\)"):
        KIN.end_effector(np.zeros(3))
    with pytest.raises(SimConfigError, match="payload_mass_kg"):
        ArmKinematics(payload_mass_kg=-1.0)
