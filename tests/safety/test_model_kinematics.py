"""A user's robot from its MuJoCo model: the supervisor's Cartesian checks on any robot."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import mujoco
import numpy as np
import pytest
import yaml

from safety.builders import RENAMED_JOINTS, someone_elses_arm
from tether.safety import LimitsError
from tether.safety.for_spec import kinematics_for, limits_for
from tether.safety.limits_file import read_limits_file
from tether.safety.model_kinematics import ModelKinematics
from tether.safety.position import PositionSupervisor
from tether.safety.position.impedance import ImpedanceModel
from tether.safety.reach import joint_reach
from tether.safety.verdict import SafetyCheck
from tether.sim import ArmKinematics, arm_spec
from tether.sim.mjcf import build_mjcf

ARM = arm_spec("position")


def _arm_model(tmp_path: Path, xml: str | None = None) -> Path:
    path = tmp_path / "robot.xml"
    path.write_text(xml if xml is not None else build_mjcf(command_interface="position"))
    return path


def test_the_built_in_arms_own_model_gives_its_kinematics_exactly(tmp_path: Path) -> None:
    model = ModelKinematics(_arm_model(tmp_path), ARM, "end_effector")
    reference = ArmKinematics()
    for q in np.random.default_rng(0).uniform(-1.0, 1.0, (20, ARM.n_joints)):
        np.testing.assert_array_equal(model.end_effector(q), reference.end_effector(q))
        np.testing.assert_allclose(model.gravity_torque(q), reference.gravity_torque(q), atol=1e-12)
        # The same spheres, in another order (the rows run along each capsule the other way).
        mine, theirs = (
            np.unique(np.column_stack(k.collision_spheres(q)).round(12), axis=0)
            for k in (model, reference)
        )
        np.testing.assert_allclose(mine, theirs, atol=1e-12)


def test_the_spheres_cover_every_colliding_geom_and_not_the_obstacle(tmp_path: Path) -> None:
    """Points sampled on each link capsule's surface lie inside a covering sphere."""

    path = _arm_model(tmp_path)
    kinematics = ModelKinematics(path, ARM, "end_effector")
    model = mujoco.MjModel.from_xml_path(str(path))
    data = mujoco.MjData(model)
    rng = np.random.default_rng(1)
    q = rng.uniform(-1.0, 1.0, ARM.n_joints)
    data.qpos[: ARM.n_joints] = q
    mujoco.mj_kinematics(model, data)
    centers, radii = kinematics.collision_spheres(q)
    links = [g for g in range(model.ngeom) if model.geom_bodyid[g] != 0]
    assert links
    for g in links:
        radius, half = model.geom_size[g][:2]
        # Points on the capsule's surface, in its frame: the cylinder and the two caps.
        direction = rng.normal(size=(400, 3))
        direction /= np.linalg.norm(direction, axis=1, keepdims=True)
        along = np.clip(rng.uniform(-half - radius, half + radius, 400), -half, half)
        local = direction * radius + np.stack([0 * along, 0 * along, along], axis=1)
        world = data.geom_xpos[g] + local @ data.geom_xmat[g].reshape(3, 3).T
        inside = np.linalg.norm(world[:, None, :] - centers[None], axis=2) <= radii[None] + 1e-12
        assert inside.any(axis=1).all()
    # The world's obstacle is not part of the robot: its 23 spheres are the links'.
    assert kinematics.n_spheres == ArmKinematics().n_spheres


@pytest.mark.parametrize("compiled", [True, False])
def test_a_robot_without_built_in_kinematics_is_kept_clear_of_an_obstacle(
    tmp_path: Path, compiled: bool
) -> None:
    spec, path = someone_elses_arm(tmp_path)
    assert kinematics_for(spec) is None
    kinematics = ModelKinematics(path, spec, "end_effector")
    home = np.array(spec.home_position_rad)
    target = (home + np.array([0.001, 0.0, 0.0, 0.0])).astype(np.float32)
    hand = kinematics.end_effector(home)
    center = kinematics.end_effector(home + np.array([0.2, 0.0, 0.0, 0.0]))
    radius = float(np.linalg.norm(center - hand)) - 0.03  # 3 cm clear, inside the margin
    base = limits_for(spec)
    fixture = {"kind": "sphere", "name": "fixture", "center": center.tolist(), "radius": radius}
    limits_path = tmp_path / "cell.yaml"
    limits_path.write_text(
        yaml.safe_dump(
            {"obstacle_margin_m": 0.06, "obstacles": [*base.to_dict()["obstacles"], fixture]}
        )
    )
    with pytest.raises(LimitsError, match="no kinematics"):
        read_limits_file(limits_path, base, cartesian=False)
    limits = read_limits_file(limits_path, base, cartesian=True)
    obs = np.zeros(spec.obs_dim)
    obs[slice(*spec.layout.joint_position)] = home
    impedance = ImpedanceModel.from_spec(spec)
    blind = PositionSupervisor(limits, impedance, compiled=compiled)
    _, passed = blind.filter(obs, target)
    assert SafetyCheck.OBSTACLE not in passed.checks  # joints only: the fixture unseen
    seeing = PositionSupervisor(limits, impedance, kinematics=kinematics, compiled=compiled)
    assert not seeing.compiled  # no closed form: every pose through MuJoCo
    command, verdict = seeing.filter(obs, target)
    assert SafetyCheck.OBSTACLE in verdict.checks
    assert not np.allclose(command, target)


def test_a_model_that_does_not_fit_the_robot_is_refused_naming_why(tmp_path: Path) -> None:
    path = _arm_model(tmp_path)
    other = dataclasses.replace(ARM, name="my-arm", joint_names=tuple(RENAMED_JOINTS.values()))
    with pytest.raises(LimitsError, match="no joint named 'j0'"):
        ModelKinematics(path, other, "end_effector")
    with pytest.raises(LimitsError, match="no site or body named 'tool'"):
        ModelKinematics(path, ARM, "tool")
    with pytest.raises(LimitsError, match="cannot load the robot model"):
        ModelKinematics(tmp_path / "missing.xml", ARM, "end_effector")
    visual = (
        build_mjcf(command_interface="position")
        .replace('contype="2"', 'contype="0"')
        .replace('conaffinity="1"', 'conaffinity="0"')
    )
    with pytest.raises(LimitsError, match="no colliding geom"):
        ModelKinematics(_arm_model(tmp_path, visual), ARM, "end_effector")
    ball = "".join(
        f'<body name="b{i}"><joint name="{name}" type="{"ball" if i == 0 else "hinge"}"/>'
        '<geom type="sphere" size="0.05"/>'
        for i, name in enumerate(ARM.joint_names)
    )
    ball = f"<mujoco><worldbody>{ball}{'</body>' * ARM.n_joints}</worldbody></mujoco>"
    with pytest.raises(LimitsError, match=r"'base_yaw' .* is not a hinge or slide joint"):
        ModelKinematics(_arm_model(tmp_path, ball), ARM, "b3")


def test_the_body_is_the_named_bodys_origin_when_no_site_has_the_name(tmp_path: Path) -> None:
    kinematics = ModelKinematics(_arm_model(tmp_path), ARM, "hand")
    assert kinematics.end_effector(np.zeros(ARM.n_joints)).shape == (3,)


def test_the_reach_bound_holds_at_every_pose_and_skips_most_of_them(tmp_path: Path) -> None:
    spec, path = someone_elses_arm(tmp_path)
    kinematics = ModelKinematics(path, spec, "end_effector")
    reach = joint_reach(kinematics)
    assert reach is not None
    rng = np.random.default_rng(2)
    for q in rng.uniform(-2.5, 2.5, (100, spec.n_joints)):
        for j, bound in enumerate(reach):
            step = np.zeros(spec.n_joints)
            step[j] = 1e-6
            (before, _), (after, _) = (kinematics.collision_spheres(q + s) for s in (0, step))
            tip = kinematics.end_effector(q + step) - kinematics.end_effector(q)
            fastest = max(np.linalg.norm(after - before, axis=1).max(), np.linalg.norm(tip))
            assert fastest / 1e-6 <= bound + 1e-6
    # The built-in arm's own bound for the joints after the base (its yaw is bounded
    # more tightly by the column's geometry).
    assert reach[1:] == pytest.approx(joint_reach(ArmKinematics())[1:])  # type: ignore[index]


def test_a_slide_without_limits_after_a_hinge_leaves_the_reach_unknown(tmp_path: Path) -> None:
    """A hinge carrying a slide carries its points anywhere along it; a slide's own reach
    is its travel (1 m per m)."""
    chain = "".join(
        f'<body name="b{i}" pos="0 0 0.1"><joint name="{name}" '
        f'type="{"slide" if i == 1 else "hinge"}"/><geom type="sphere" size="0.05"/>'
        for i, name in enumerate(ARM.joint_names)
    )
    xml = f"<mujoco><worldbody>{chain}{'</body>' * ARM.n_joints}</worldbody></mujoco>"
    kinematics = ModelKinematics(_arm_model(tmp_path, xml), ARM, "b3")
    assert kinematics.joint_reach() is None
    limited = xml.replace('type="slide"', 'type="slide" limited="true" range="-0.2 0.3"')
    reach = ModelKinematics(_arm_model(tmp_path, limited), ARM, "b3").joint_reach()
    assert reach is not None
    assert reach[1] == 1.0
    # From the base hinge: three bodies 0.1 m apart, the slide's 0.3 m travel on the way.
    assert reach[0] == pytest.approx(0.1 + 0.3 + 0.1 + 0.1)
