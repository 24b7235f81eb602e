"""Fixtures for the policy tests: a small robot spec and bundles built from it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tether.policy import PolicyBundle, init_bundle
from tether.spec import Box, ObservationLayout, RobotSpec, Sphere

torch.set_num_threads(1)


def make_spec(n_joints: int = 3) -> RobotSpec:
    """A planar-ish arm spec: q, qdot, end effector (3), target (3)."""
    joints = tuple(f"j{i}" for i in range(n_joints))
    names = (
        tuple(f"{j}_pos" for j in joints)
        + tuple(f"{j}_vel" for j in joints)
        + ("ee_x", "ee_y", "ee_z", "target_x", "target_y", "target_z")
    )
    n = n_joints
    return RobotSpec(
        name="test-arm",
        joint_names=joints,
        control_period_s=0.02,
        observation_names=names,
        layout=ObservationLayout(
            joint_position=(0, n),
            joint_velocity=(n, 2 * n),
            end_effector=(2 * n, 2 * n + 3),
            target=(2 * n + 3, 2 * n + 6),
        ),
        joint_position_low_rad=(-2.5,) * n,
        joint_position_high_rad=(2.5,) * n,
        joint_velocity_limit_rad_s=(4.0,) * n,
        joint_acceleration_limit_rad_s2=(40.0,) * n,
        torque_limit_nm=(5.0,) * n,
        home_position_rad=(0.0,) * n,
        workspace=Box((-1.0, -1.0, 0.0), (1.0, 1.0, 1.2), "workspace"),
        obstacles=(Sphere((0.4, 0.0, 0.3), 0.1),),
    )


@pytest.fixture
def spec() -> RobotSpec:
    return make_spec()


@pytest.fixture
def bundle(tmp_path: Path, spec: RobotSpec) -> PolicyBundle:
    return init_bundle(tmp_path / "policy", spec, hidden_sizes=(64, 64), seed=3)
