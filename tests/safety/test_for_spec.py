"""One place decides what the supervisor enforces for a spec: the arm's presets and
kinematics for the built-in arm (per command interface), the spec's own limits and joint
checks otherwise; the position supervisor on normalized actions for a position spec."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from safety.builders import seven_joint_spec
from tether.assets import load_pretrained_bundle, pretrained_bundle_path
from tether.safety import LimitsError, SafetyLimits, Supervisor, SupervisorConfig
from tether.safety.for_spec import (
    is_builtin_arm,
    kinematics_for,
    limits_for,
    supervisor_for,
    unchecked_cartesian,
)
from tether.safety.position import PositionActionSupervisor
from tether.safety.position.presets import arm_impedance, arm_position_limits
from tether.safety.presets import arm_limits
from tether.sim import ArmKinematics, arm_spec
from tether.sim.spec import DEFAULT_COMMAND_INTERFACE


def test_the_default_interface_decides_the_arm_and_the_shipped_bundle() -> None:
    assert arm_spec().command_interface == DEFAULT_COMMAND_INTERFACE
    assert pretrained_bundle_path(command_interface="position").parent.name == (
        "pretrained-position"
    )
    assert pretrained_bundle_path(command_interface="torque").parent.name == "pretrained"
    assert pretrained_bundle_path() == pretrained_bundle_path(
        command_interface=DEFAULT_COMMAND_INTERFACE
    )
    assert load_pretrained_bundle().robot_spec == arm_spec()


def test_limits_use_the_arm_preset_of_its_interface_only_for_the_arm() -> None:
    assert limits_for(arm_spec("position")) == arm_position_limits()
    assert limits_for(arm_spec("torque")) == arm_limits()
    other = seven_joint_spec()
    assert limits_for(other) == SafetyLimits.from_spec(other)


def test_only_the_arm_gets_kinematics() -> None:
    for interface in ("position", "torque"):
        assert is_builtin_arm(arm_spec(interface))
        assert isinstance(kinematics_for(arm_spec(interface)), ArmKinematics)
    other = seven_joint_spec()
    assert not is_builtin_arm(other)
    assert kinematics_for(other) is None


def test_a_supervisor_for_a_spec_enforces_the_limits_given_or_the_specs() -> None:
    spec = arm_spec("position")
    assert supervisor_for(spec).limits == arm_position_limits()
    tight = arm_position_limits().tightened(0.5)
    assert supervisor_for(spec, tight).limits == tight


def test_each_interface_gets_its_own_supervisor_with_the_specs_gains() -> None:
    position = supervisor_for(arm_spec("position"))
    assert isinstance(position, PositionActionSupervisor)
    # One source of truth: the supervisor models the gains the simulated controller has.
    assert position.position.impedance == arm_impedance()
    assert position.position.impedance.stiffness_nm_per_rad == (
        arm_spec("position").joint_stiffness_nm_rad
    )
    assert isinstance(supervisor_for(arm_spec("torque")), Supervisor)
    with pytest.raises(LimitsError, match="torque supervisor"):
        supervisor_for(arm_spec("position"), config=SupervisorConfig())


def test_the_position_supervisor_speaks_normalized_actions() -> None:
    spec = arm_spec("position")
    sup = supervisor_for(spec)
    obs = np.zeros(spec.obs_dim, dtype=np.float32)
    home = np.asarray(spec.home_position_rad)
    obs[:4] = home
    at_home = spec.action_for_position(home).astype(np.float32)
    out, verdict = sup.filter(obs, at_home)
    assert out is at_home  # passed bit-identical
    assert not verdict.intervened
    # A jump to the end of the range is corrected to a step the arm may take, and the
    # target it maps to is within the per-step change of the measured pose.
    far = np.ones(4, dtype=np.float32)
    out, verdict = sup.filter(obs, far, at_home)
    assert verdict.intervened
    step = np.asarray(sup.limits.velocity_limit_rad_s) * sup.limits.control_period_s
    assert np.all(np.abs(spec.commanded_position(out) - home) <= step + 1e-6)
    # Non-finite and misshapen actions never pass.
    for bad in (np.full(4, np.nan, dtype=np.float32), np.zeros(3, dtype=np.float32)):
        out, verdict = sup.filter(obs, bad, at_home)
        assert np.isfinite(out).all()
        assert out.shape == (4,)
        assert verdict.intervened


def test_declared_limits_that_nothing_checks_are_named() -> None:
    arm = arm_spec()
    assert unchecked_cartesian(arm, limits_for(arm), kinematics_for(arm)) is None
    other = seven_joint_spec()
    said = unchecked_cartesian(other, limits_for(other), kinematics_for(other))
    assert said is not None
    assert "'synthetic-7' declares a workspace and 1 obstacle(s)" in said
    assert "checks its joints" in said
    joints_only = dataclasses.replace(limits_for(other), workspace=None, obstacles=())
    assert unchecked_cartesian(other, joints_only, None) is None
