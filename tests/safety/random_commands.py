"""A uniformly random position-command policy on the built-in MuJoCo arm, counted by the
physics: the run behind ``test_position_physics`` and ``benchmarks/bench_contacts.py``.

The policy commands absolute targets drawn uniformly from the whole command range (which
reaches ``position_command_overreach_rad`` beyond each joint's range), a fresh one every
``HOLD_STEPS`` steps: long enough for the arm to get there, so without a supervisor it is
driven into its joint limits and through the obstacle. Violations are what ``ArmEnv``
measures from the physics (``info``), not what the supervisor believes.
"""

from __future__ import annotations

import numpy as np

from tether.safety.supervises import ActionSupervisor
from tether.sim import ArmDynamics, ArmEnv, ArmEnvConfig, DriftSchedule

NOMINAL = ArmDynamics.nominal()
# The demo drift at its end: gain 0.6, friction x4, 0.5 kg payload, one step of delay.
DRIFTED = DriftSchedule.demo().dynamics_at(10**9, NOMINAL)
ARMS = {"nominal": NOMINAL, "drifted": DRIFTED}
HOLD_STEPS = 25


def random_command_run(
    dynamics: ArmDynamics, supervisor: ActionSupervisor | None, steps: int, seed: int
) -> tuple[int, int]:
    """(obstacle-contact steps, joint-limit-violation steps) MuJoCo measured."""
    env = ArmEnv(dynamics=dynamics, seed=seed, config=ArmEnvConfig(command_interface="position"))
    assert env.robot_spec.command_interface == "position"
    return random_action_run(env, supervisor, steps, seed, HOLD_STEPS)


def random_action_run(
    env: ArmEnv, supervisor: ActionSupervisor | None, steps: int, seed: int, hold_steps: int
) -> tuple[int, int]:
    """A uniformly random action, a fresh one every ``hold_steps`` steps, on ``env`` (any
    command interface), through ``supervisor`` if given: (obstacle-contact steps,
    joint-limit-violation steps) MuJoCo measured."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset()
    previous: np.ndarray | None = None
    contacts = violations = 0
    action = np.zeros(env.robot_spec.act_dim, dtype=np.float32)
    for step in range(steps):
        if step % hold_steps == 0:
            action = rng.uniform(-1.0, 1.0, env.robot_spec.act_dim).astype(np.float32)
        executed = action
        if supervisor is not None:
            executed, _ = supervisor.filter(obs, action, previous)
            previous = executed
        obs, _, terminated, truncated, info = env.step(executed)
        contacts += bool(info["obstacle_contact"])
        violations += bool(info["joint_limit_violation"])
        if terminated or truncated:
            obs, _ = env.reset()
            previous = None
    return contacts, violations
