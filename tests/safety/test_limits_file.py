"""A deployment's limits file: it makes the served robot's limits stricter, never looser."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml

from safety.builders import seven_joint_spec
from tether.safety import LimitsError, SafetyLimits
from tether.safety.for_spec import limits_for
from tether.safety.limits_file import read_limits_file
from tether.safety.position import PositionSupervisor
from tether.safety.position.presets import arm_impedance
from tether.safety.verdict import SafetyCheck
from tether.sim import ArmKinematics, arm_spec

ARM = arm_spec("position")


def _read(tmp_path: Path, text: str, base: SafetyLimits | None = None) -> SafetyLimits:
    path = tmp_path / "limits.yaml"
    path.write_text(text)
    return read_limits_file(path, base or limits_for(ARM), cartesian=True)


def _supervisor(limits: SafetyLimits, compiled: bool) -> PositionSupervisor:
    return PositionSupervisor(
        limits, arm_impedance(), kinematics=ArmKinematics(), compiled=compiled
    )


def _observation(q: np.ndarray) -> np.ndarray:
    obs = np.zeros(ARM.obs_dim)
    start, stop = ARM.layout.joint_position
    obs[start:stop] = q
    return obs


def test_a_file_changes_only_the_fields_it_names(tmp_path: Path) -> None:
    base = limits_for(ARM)
    limits = _read(tmp_path, "limits:\n  velocity_limit_rad_s: [1, 1, 1, 1]\n")
    assert limits.velocity_limit_rad_s == (1.0, 1.0, 1.0, 1.0)
    assert limits.to_dict() | {"velocity_limit_rad_s": None} == base.to_dict() | {
        "velocity_limit_rad_s": None
    }


@pytest.mark.parametrize("compiled", [True, False])
def test_an_obstacle_the_file_adds_is_kept_clear_of(tmp_path: Path, compiled: bool) -> None:
    # A fixture just past the hand, 3 cm clear of it (inside the 6 cm margin): a command
    # that moves the hand toward it is refused; without the fixture it passes.
    home = np.array(ARM.home_position_rad)
    target = home + np.array([0.001, 0.0, 0.0, 0.0])
    kinematics = ArmKinematics()
    hand = np.asarray(kinematics.end_effector(home))
    center = np.asarray(kinematics.end_effector(home + np.array([0.2, 0.0, 0.0, 0.0])))
    radius = float(np.linalg.norm(center - hand)) - 0.03
    base = limits_for(ARM)
    added = {"kind": "sphere", "name": "fixture", "center": center.tolist(), "radius": radius}
    obstacles = [*base.to_dict()["obstacles"], added]
    limits = _read(tmp_path, yaml.safe_dump({"obstacles": obstacles}))
    obs = _observation(home)
    _, free = _supervisor(base, compiled).filter(obs, target.astype(np.float32))
    assert SafetyCheck.OBSTACLE not in free.checks  # the base lets the arm reach there
    command, verdict = _supervisor(limits, compiled).filter(obs, target.astype(np.float32))
    assert SafetyCheck.OBSTACLE in verdict.checks
    assert not np.allclose(command, target)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("velocity_limit_rad_s: [9, 1, 1, 1]", "velocity_limit_rad_s[0] is 9.0"),
        ("position_high_rad: [2.6, 1.9, 2.9, 1.6]", "position_high_rad[2] is 2.9"),
        ("position_low_rad: [-2.6, -0.7, -0.3, -1.6]", "position_low_rad[1] is -0.7"),
        ("position_margin_rad: [0.1, 0.1, 0.0, 0.1]", "position_margin_rad[2] is 0.0"),
        ("braking_deceleration_rad_s2: [99, 10, 15, 35.5]", "braking_deceleration_rad_s2[0]"),
        ("command_staleness_s: 1.0", "command_staleness_s is 1.0"),
        ("obstacle_margin_m: 0.0", "obstacle_margin_m is 0.0"),
        ("obstacles: []", "leave out the robot's ['obstacle']"),
        ("workspace: null", "workspace none is not inside"),
        (
            "workspace: {kind: box, low: [-2, -0.75, -0.05], high: [0.75, 0.75, 1.05]}",
            "workspace low [-2.0",
        ),
        ("joint_names: [a, b, c, d]", "joint_names is ('a', 'b', 'c', 'd')"),
        ("control_period_s: 0.01", "control_period_s is 0.01"),
        ("home_position_rad: [9, 0, 0, 0]", "home_position_rad[0] (base_yaw) is 9.0"),
    ],
)
def test_anything_looser_than_the_robots_own_limits_is_refused(
    tmp_path: Path, text: str, named: str
) -> None:
    with pytest.raises(LimitsError, match="only make them stricter") as caught:
        _read(tmp_path, text + "\n")
    assert named in str(caught.value)


def test_every_offending_field_is_named_at_once(tmp_path: Path) -> None:
    with pytest.raises(LimitsError) as caught:
        _read(tmp_path, "velocity_limit_rad_s: [9, 1, 1, 1]\ncommand_staleness_s: 1.0\n")
    assert "velocity_limit_rad_s[0]" in str(caught.value)
    assert "command_staleness_s" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("", "got nothing"),
        ("{}\n", "names no safety-limit field"),
        ("- 1\n", "got list"),
        ("bogus: 1\n", "unknown fields ['bogus']"),
        ("velocity_limit_rad_s: [fast, 1, 1, 1]\n", "could not convert"),
        ("velocity_limit_rad_s: [1, 1]\n", "needs 4 entries"),
        ("velocity_limit_rad_s: [1, 1, 1, .nan]\n", "finite"),
        ("{unclosed\n", "cannot read safety limits"),
    ],
)
def test_a_file_that_is_not_limits_is_refused_naming_why(
    tmp_path: Path, text: str, named: str
) -> None:
    with pytest.raises(LimitsError) as caught:
        _read(tmp_path, text)
    assert named in str(caught.value)
    assert str(tmp_path / "limits.yaml") in str(caught.value)


def test_a_robot_without_kinematics_takes_joint_limits_but_no_cartesian_ones(
    tmp_path: Path,
) -> None:
    spec = seven_joint_spec()
    base = limits_for(spec)
    path = tmp_path / "limits.yaml"
    path.write_text("command_staleness_s: 0.05\n")
    assert read_limits_file(path, base, cartesian=False).command_staleness_s == 0.05
    path.write_text("obstacle_margin_m: 0.2\n")
    with pytest.raises(LimitsError, match="no kinematics for this robot"):
        read_limits_file(path, base, cartesian=False)


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LimitsError, match="cannot read safety limits"):
        read_limits_file(tmp_path / "none.yaml", limits_for(ARM), cartesian=True)


def test_a_robot_whose_own_home_sits_in_its_margin_still_takes_a_file(tmp_path: Path) -> None:
    base = limits_for(ARM)
    edge = dataclasses.replace(base, home_position_rad=(2.59, *base.home_position_rad[1:]))
    assert _read(tmp_path, "command_staleness_s: 0.05\n", edge).command_staleness_s == 0.05
    with pytest.raises(LimitsError, match=r"home_position_rad\[1\]"):
        _read(tmp_path, "home_position_rad: [2.59, 9, 0, 0]\n", edge)
