"""On the built-in MuJoCo arm, a uniformly random policy never violates a joint limit or
touches the obstacle when the supervisor filters it, and does both without it.

Violations are what ``ArmEnv`` measures from the physics (``info``), not what the
supervisor believes.
"""

from __future__ import annotations

from safety.random_commands import random_action_run
from tether.safety import Supervisor, SupervisorConfig
from tether.safety.presets import arm_supervisor
from tether.sim import ArmEnv
from tether.sim.config import ArmEnvConfig
from tether.sim.drift import DriftSchedule

# These tests exercise the torque interface, the arm's second command interface.
TORQUE = ArmEnvConfig(command_interface="torque")

STEPS = 10_000


def _random_policy_run(
    supervisor: Supervisor | None, steps: int, seed: int, env: ArmEnv | None = None
) -> tuple[int, int]:
    """A fresh uniformly random torque every step."""
    return random_action_run(env or ArmEnv(config=TORQUE, seed=seed), supervisor, steps, seed, 1)


def test_random_policy_with_the_supervisor_never_violates_a_limit_or_touches_the_obstacle() -> None:
    contacts, limit_violations = _random_policy_run(arm_supervisor(), STEPS, seed=0)
    assert (contacts, limit_violations) == (0, 0)


def test_the_same_random_policy_without_the_supervisor_does_both() -> None:
    contacts, limit_violations = _random_policy_run(None, STEPS, seed=0)
    assert contacts > 0
    assert limit_violations > 0


def _drifting_run(config: SupervisorConfig, steps: int = 3000, seed: int = 1) -> tuple[int, int]:
    # The demo's drift, compressed: the arm's actuators weaken and it picks up the heaviest
    # rated payload that ArmKinematics does not know about, then commands arrive a step late.
    env = ArmEnv(config=TORQUE, seed=seed, drift=DriftSchedule.demo(start_step=0, ramp_steps=1000))
    return _random_policy_run(arm_supervisor(config=config), steps, seed, env)


def test_on_the_drifting_arm_the_supervisor_learns_the_load_and_still_never_touches() -> None:
    assert _drifting_run(SupervisorConfig()) == (0, 0)


def test_on_the_drifting_arm_without_load_estimation_the_arm_touches_the_obstacle() -> None:
    contacts, _ = _drifting_run(SupervisorConfig(load_estimation_gain=0.0))
    assert contacts > 0
