"""RobotSpec refuses inconsistent descriptions and round-trips through its dict form."""

from __future__ import annotations

import dataclasses

import pytest

from tether.errors import SpecError
from tether.spec import Box, ObservationLayout, RobotSpec, Sphere


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
