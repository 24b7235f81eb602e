"""SafetyLimits: derived from a spec, refused when inconsistent, round-trips through YAML."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from safety.builders import GAIN_HI, seven_joint_limits, seven_joint_spec
from tether.safety import LimitsConfig, LimitsError, SafetyError, SafetyLimits


def test_from_spec_takes_the_declared_limits_and_the_config() -> None:
    spec = seven_joint_spec()
    cfg = LimitsConfig(position_margin_rad=0.1, velocity_fraction=0.5, braking_fraction=0.25)
    limits = SafetyLimits.from_spec(spec, cfg, acceleration_per_action_rad_s2=(GAIN_HI,) * 7)
    assert limits.position_low_rad == spec.joint_position_low_rad
    assert limits.position_margin_rad == (0.1,) * 7
    assert limits.velocity_limit_rad_s == tuple(v * 0.5 for v in spec.joint_velocity_limit_rad_s)
    assert limits.braking_deceleration_rad_s2 == (5.0,) * 7
    assert limits.acceleration_per_action_rad_s2 == (GAIN_HI,) * 7
    assert limits.action_scale_nm == spec.torque_limit_nm
    assert limits.obstacles == spec.obstacles


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"position_low_rad": (3.0,) + (-1.0,) * 6}, "leave no room"),
        ({"position_margin_rad": (-0.1,) * 7}, "negative margin"),
        ({"position_margin_rad": (2.0,) * 7}, "leave no room"),
        ({"velocity_limit_rad_s": (1.0,) * 6}, "needs 7 entries"),
        ({"torque_limit_nm": (0.0,) * 7}, "must be positive"),
        ({"torque_limit_nm": (100.0,) * 7}, "exceeds action_scale_nm"),
        ({"braking_deceleration_rad_s2": (float("nan"),) * 7}, "must be finite"),
        ({"control_period_s": 0.0}, "control_period_s must be a positive"),
        ({"obstacle_margin_m": -0.01}, "obstacle_margin_m must be a finite number >= 0"),
        ({"joint_names": ()}, "at least one joint"),
    ],
)
def test_inconsistent_limits_are_refused(change: dict[str, object], fragment: str) -> None:
    base = seven_joint_limits()
    with pytest.raises(LimitsError, match=fragment) as info:
        dataclasses.replace(base, **change)  # type: ignore[arg-type]
    assert isinstance(info.value, SafetyError)


def test_yaml_round_trip_is_exact(tmp_path: Path) -> None:
    limits = seven_joint_limits()
    path = tmp_path / "limits.yaml"
    limits.to_yaml(path)
    assert SafetyLimits.from_yaml(path) == limits


def test_yaml_with_unknown_or_missing_fields_is_refused(tmp_path: Path) -> None:
    data = seven_joint_limits().to_dict()
    path = tmp_path / "bad.yaml"
    path.write_text("limits:\n  torque_limt_nm: [1.0]\n")
    with pytest.raises(LimitsError, match="unknown fields"):
        SafetyLimits.from_yaml(path)
    del data["torque_limit_nm"]
    with pytest.raises(LimitsError, match="torque_limit_nm"):
        SafetyLimits.from_dict(data)
    path.write_text("- 1\n- 2\n")
    with pytest.raises(LimitsError, match="mapping"):
        SafetyLimits.from_yaml(path)
    with pytest.raises(LimitsError, match="cannot read"):
        SafetyLimits.from_yaml(tmp_path / "absent.yaml")


def test_tightened_is_stricter_everywhere_and_one_is_identity() -> None:
    limits = seven_joint_limits()
    assert limits.tightened(1.0) == limits
    tight = limits.tightened(0.5)
    assert np.all(np.asarray(tight.velocity_limit_rad_s) < limits.velocity_limit_rad_s)
    assert np.all(np.asarray(tight.position_margin_rad) > limits.position_margin_rad)
    usable = np.asarray(limits.position_high_rad) - np.asarray(limits.position_low_rad)
    tight_usable = usable - 2 * np.asarray(tight.position_margin_rad)
    old_usable = usable - 2 * np.asarray(limits.position_margin_rad)
    np.testing.assert_allclose(tight_usable, 0.5 * old_usable)
    assert tight.obstacle_margin_m > limits.obstacle_margin_m
    assert tight.workspace_margin_m > limits.workspace_margin_m
    assert tight.torque_limit_nm == limits.torque_limit_nm  # braking authority is kept
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(LimitsError, match="tightening factor"):
            limits.tightened(bad)


def test_tightened_keeps_the_untightened_range_as_the_hard_one() -> None:
    limits = seven_joint_limits()
    assert limits.hard_position_margin_rad == ()
    assert limits.hard_margin_rad == limits.position_margin_rad
    tight = limits.tightened(0.5)
    assert tight.hard_position_margin_rad == limits.position_margin_rad
    # Tightening twice still keeps the original range, and it survives YAML.
    assert tight.tightened(0.5).hard_position_margin_rad == limits.position_margin_rad
    assert SafetyLimits.from_dict(tight.to_dict()) == tight
    for bad in ((0.1,) * 3, (-0.1,) * 7, (1.0,) * 7, (float("nan"),) * 7):
        with pytest.raises(LimitsError, match="hard_position_margin_rad"):
            dataclasses.replace(limits, hard_position_margin_rad=bad)


def test_viscous_damping_defaults_to_none_survives_yaml_and_tightening(tmp_path: Path) -> None:
    limits = seven_joint_limits()
    assert limits.viscous_damping_per_rad_s == ()
    assert limits.damping_per_rad_s == (0.0,) * 7
    damped = SafetyLimits.from_spec(
        seven_joint_spec(),
        acceleration_per_action_rad_s2=(GAIN_HI,) * 7,
        viscous_damping_per_rad_s=(0.2,) * 7,
    )
    assert damped.damping_per_rad_s == (0.2,) * 7
    # Damping is physics, not a policy limit: tightening keeps it.
    assert damped.tightened(0.5).viscous_damping_per_rad_s == (0.2,) * 7
    path = tmp_path / "damped.yaml"
    damped.to_yaml(path)
    assert SafetyLimits.from_yaml(path) == damped
    for bad in ((0.1,) * 3, (-0.1,) * 7, (float("inf"),) * 7):
        with pytest.raises(LimitsError, match="viscous_damping_per_rad_s"):
            dataclasses.replace(limits, viscous_damping_per_rad_s=bad)
