"""RobotSpec refuses inconsistent descriptions, round-trips through its dict form, and
keeps its command interface in the fingerprint."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tether.errors import SpecError
from tether.spec import Box, ObservationLayout, RobotSpec, Sphere, fingerprint_of


def _spec(**overrides: object) -> RobotSpec:
    n = 2
    names = ("q0", "q1", "qd0", "qd1", "ee_x", "ee_y", "ee_z", "t_x", "t_y", "t_z")
    kwargs: dict[str, object] = dict(
        name="toy",
        joint_names=("j0", "j1"),
        control_period_s=0.02,
        observation_names=names,
        layout=ObservationLayout((0, n), (n, 2 * n), (4, 7), (7, 10)),
        joint_position_low_rad=(-1.0, -1.0),
        joint_position_high_rad=(1.0, 1.0),
        joint_velocity_limit_rad_s=(2.0, 2.0),
        joint_acceleration_limit_rad_s2=(10.0, 10.0),
        torque_limit_nm=(5.0, 5.0),
        home_position_rad=(0.0, 0.0),
        workspace=Box((-1.0, -1.0, 0.0), (1.0, 1.0, 1.0)),
        obstacles=(Sphere((0.5, 0.0, 0.5), 0.1),),
    )
    kwargs.update(overrides)
    return RobotSpec(**kwargs)  # type: ignore[arg-type]


def test_round_trip_through_dict_is_exact() -> None:
    spec = _spec()
    assert RobotSpec.from_dict(spec.to_dict()) == spec
    assert spec.obs_dim == 10
    assert spec.act_dim == 2
    assert spec.action_names == ("j0_torque", "j1_torque")


def test_fingerprint_changes_with_names() -> None:
    assert _spec().fingerprint() != _spec(joint_names=("a", "b")).fingerprint()


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"joint_position_low_rad": (2.0, -1.0)}, r"low \(2.0\) must be below high"),
        ({"torque_limit_nm": (5.0,)}, "needs 2 entries"),
        ({"joint_velocity_limit_rad_s": (0.0, 1.0)}, "must be positive"),
        ({"control_period_s": 0.0}, "control_period_s must be positive"),
        ({"home_position_rad": (3.0, 0.0)}, "outside"),
        ({"layout": ObservationLayout((0, 3), (2, 4), (4, 7), (7, 10))}, "layout.joint_position"),
    ],
)
def test_inconsistent_specs_are_refused(overrides: dict[str, object], fragment: str) -> None:
    with pytest.raises(SpecError, match=fragment):
        _spec(**overrides)


def test_box_requires_low_below_high() -> None:
    with pytest.raises(SpecError, match="low < high"):
        Box((0.0, 0.0, 0.0), (1.0, 0.0, 1.0))
    assert dataclasses.is_dataclass(Box((0, 0, 0), (1, 1, 1)))


def _position_spec(**overrides: object) -> RobotSpec:
    gains: dict[str, object] = dict(
        command_interface="position",
        joint_stiffness_nm_rad=(10.0, 20.0),
        joint_damping_nm_s_rad=(1.0, 0.5),
        position_command_overreach_rad=0.1,
    )
    gains.update(overrides)
    return _spec(**gains)


def test_a_spec_is_torque_commanded_unless_it_says_otherwise() -> None:
    torque, position = _spec(), _position_spec()
    assert torque.command_interface == "torque"
    assert position.action_names == ("j0_position", "j1_position")
    assert RobotSpec.from_dict(position.to_dict()) == position


def test_a_spec_written_before_command_interfaces_reads_as_torque_with_its_old_fingerprint() -> (
    None
):
    spec = _spec()
    old = spec.to_dict()
    for key in (
        "command_interface",
        "joint_stiffness_nm_rad",
        "joint_damping_nm_s_rad",
        "position_command_overreach_rad",
    ):
        del old[key]
    reread = RobotSpec.from_dict(old)
    assert reread == spec
    # The fingerprint bundles and clients computed before interfaces existed.
    assert reread.fingerprint() == fingerprint_of(
        spec.observation_names, spec.action_names, spec.joint_names
    )


def test_the_interface_is_part_of_the_fingerprint() -> None:
    names = ("a0", "a1")
    torque = _spec(action_names=names)
    position = _position_spec(action_names=names)
    assert torque.fingerprint() != position.fingerprint()


def test_position_mapping_spans_the_widened_range_and_inverts() -> None:
    spec = _position_spec()
    low, high = np.array([-1.1, -1.1]), np.array([1.1, 1.1])
    np.testing.assert_allclose(spec.commanded_position(np.array([-1.0, 1.0])), [low[0], high[1]])
    np.testing.assert_allclose(spec.commanded_position(np.array([5.0, -5.0])), [high[0], low[1]])
    q = np.array([0.3, -0.7])
    np.testing.assert_allclose(spec.commanded_position(spec.action_for_position(q)), q)


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"joint_stiffness_nm_rad": (1.0,)}, "needs 2 entries"),
        ({"joint_stiffness_nm_rad": (0.0, 1.0)}, "must be positive"),
        ({"joint_damping_nm_s_rad": (-1.0, 1.0)}, ">= 0"),
        ({"position_command_overreach_rad": -0.1}, "overreach"),
        ({"command_interface": "velocity"}, "command_interface must be one of"),
    ],
)
def test_inconsistent_position_specs_are_refused(
    overrides: dict[str, object], fragment: str
) -> None:
    with pytest.raises(SpecError, match=fragment):
        _position_spec(**overrides)


def test_a_torque_spec_has_no_impedance_and_no_position_mapping() -> None:
    with pytest.raises(SpecError, match="impedance gains"):
        _spec(joint_stiffness_nm_rad=(1.0, 1.0))
    with pytest.raises(SpecError, match="commanded by torque"):
        _spec().commanded_position(np.zeros(2))
