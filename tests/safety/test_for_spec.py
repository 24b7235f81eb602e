"""One place decides what the supervisor enforces for a spec: the arm's presets and
kinematics for the built-in arm, the spec's own limits and joint checks otherwise."""

from __future__ import annotations

from safety.builders import seven_joint_spec
from tether.safety import SafetyLimits
from tether.safety.for_spec import is_builtin_arm, kinematics_for, limits_for, supervisor_for
from tether.safety.presets import arm_limits
from tether.sim import ArmKinematics, arm_spec


def test_limits_use_the_arm_preset_only_for_the_arm() -> None:
    assert limits_for(arm_spec()) == arm_limits()
    other = seven_joint_spec()
    assert limits_for(other) == SafetyLimits.from_spec(other)


def test_only_the_arm_gets_kinematics() -> None:
    assert is_builtin_arm(arm_spec())
    assert isinstance(kinematics_for(arm_spec()), ArmKinematics)
    other = seven_joint_spec()
    assert not is_builtin_arm(other)
    assert kinematics_for(other) is None


def test_a_supervisor_for_a_spec_enforces_the_limits_given_or_the_specs() -> None:
    spec = arm_spec()
    assert supervisor_for(spec).limits == arm_limits()
    tight = arm_limits().tightened(0.5)
    assert supervisor_for(spec, tight).limits == tight
