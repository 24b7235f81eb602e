"""The damped one-step model lets a joint use its whole velocity range, and no more.

A policy that pushes one joint at full torque from rest, through the supervisor, on the
MuJoCo arm at its least damped rated dynamics (lowest damping and highest actuator gain
domain randomization draws): the joint must get close to its velocity limit and never
past it. Both ways the test can fail are shown: the undamped model (the supervisor
before it knew about damping) holds the joints to a fifth to a half of their limit, and
assuming twice the damping the arm has drives them 60-100 % past it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tether.safety import SafetyLimits
from tether.safety.presets import arm_limits, arm_supervisor
from tether.sim import ArmDynamics, ArmEnv, ArmKinematics, DomainRandomization, DriftSchedule
from tether.sim.config import ArmEnvConfig
from tether.sim.dynamics import apply_dynamics
from tether.sim.mjcf import build_model

# These tests exercise the torque interface, the arm's second command interface.
TORQUE = ArmEnvConfig(command_interface="torque")

LIMITS = arm_limits()
N = LIMITS.n_joints
_RANGES = DomainRandomization.default()
# Least damping per unit of action: the most the supervisor's damping may assume.
LEAST_DAMPED = ArmDynamics(
    actuator_gain=_RANGES.actuator_gain[1], joint_damping=_RANGES.joint_damping[0]
)
STEPS = 60  # 1.2 s: every joint reaches its steady speed well inside its range
KINEMATICS = ArmKinematics()


def top_speed_fraction(limits: SafetyLimits, joint: int, dynamics: ArmDynamics) -> float:
    """The fastest the joint moves (true state, fraction of its velocity limit) while the
    policy pushes it at full torque from rest near its lower limit, the other joints
    holding against gravity, the arm turned away from the obstacle."""
    supervisor = arm_supervisor(limits)
    env = ArmEnv(config=TORQUE, dynamics=dynamics, seed=0)
    start = np.array([1.57, 0.0, 0.0, 0.0])
    start[joint] = LIMITS.position_low_rad[joint] + LIMITS.position_margin_rad[joint] + 0.05
    obs, _ = env.reset(seed=0, options={"joint_position": start, "joint_velocity": np.zeros(N)})
    scale = np.asarray(LIMITS.action_scale_nm)
    previous: np.ndarray | None = None
    top = 0.0
    for _ in range(STEPS):
        proposal = KINEMATICS.gravity_torque(obs[:N].astype(np.float64)) / scale
        proposal[joint] = 1.0
        previous, _ = supervisor.filter(obs, proposal.astype(np.float32), previous)
        obs, _, _, _, info = env.step(previous)
        assert not info["joint_limit_violation"]
        top = max(top, abs(float(env.true_state().joint_velocity_rad_s[joint])))
    return top / LIMITS.velocity_limit_rad_s[joint]


@pytest.mark.parametrize("joint", range(N))
def test_a_full_push_reaches_the_velocity_limit_and_stays_under_it(joint: int) -> None:
    assert 0.9 <= top_speed_fraction(LIMITS, joint, LEAST_DAMPED) <= 1.02


def test_the_undamped_model_holds_the_joints_far_below_their_limit() -> None:
    undamped = dataclasses.replace(LIMITS, viscous_damping_per_rad_s=())
    fractions = [top_speed_fraction(undamped, j, LEAST_DAMPED) for j in range(N)]
    assert max(fractions) < 0.6, fractions


def test_assuming_more_damping_than_the_arm_has_drives_it_past_its_limit() -> None:
    doubled = tuple(2.0 * c for c in LIMITS.damping_per_rad_s)
    overdamped = dataclasses.replace(LIMITS, viscous_damping_per_rad_s=doubled)
    fractions = [top_speed_fraction(overdamped, j, LEAST_DAMPED) for j in range(N)]
    assert min(fractions) > 1.5, fractions


def test_the_preset_assumes_no_more_damping_than_any_dynamics_the_arm_is_given() -> None:
    # The MuJoCo model's damping over the largest actuator gain, per unit of action, at
    # the lowest damping randomization draws; the demo drift leaves damping alone.
    model = build_model()
    apply_dynamics(model, LEAST_DAMPED)
    per_action = model.dof_damping / (
        LEAST_DAMPED.actuator_gain * np.asarray(LIMITS.action_scale_nm)
    )
    assert np.all(np.asarray(LIMITS.damping_per_rad_s) <= per_action * (1 + 1e-12))
    assert np.allclose(LIMITS.damping_per_rad_s, per_action)
    assert all(ramp.knob != "joint_damping" for ramp in DriftSchedule.demo().ramps)
