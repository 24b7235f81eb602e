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
# The hand of ``random_action_run``: it pushes for HAND_STEPS of every HAND_PERIOD steps
# (the last ones of each period).
HAND_PERIOD = 120
HAND_STEPS = 40
HAND_SEED_OFFSET = 1000


def random_command_run(
    dynamics: ArmDynamics,
    supervisor: ActionSupervisor | None,
    steps: int,
    seed: int,
    hand: float = 0.0,
) -> tuple[int, int]:
    """(obstacle-contact steps, joint-limit-violation steps) MuJoCo measured; ``hand``
    as ``random_action_run`` takes it."""
    env = ArmEnv(dynamics=dynamics, seed=seed, config=ArmEnvConfig(command_interface="position"))
    assert env.robot_spec.command_interface == "position"
    return random_action_run(env, supervisor, steps, seed, HOLD_STEPS, hand)


def random_action_run(
    env: ArmEnv,
    supervisor: ActionSupervisor | None,
    steps: int,
    seed: int,
    hold_steps: int,
    hand: float = 0.0,
) -> tuple[int, int]:
    """A uniformly random action, a fresh one every ``hold_steps`` steps, on ``env`` (any
    command interface), through ``supervisor`` if given: (obstacle-contact steps,
    joint-limit-violation steps) MuJoCo measured.

    With ``hand`` > 0 a person's hand holds the arm for ``HAND_STEPS`` of every
    ``HAND_PERIOD`` steps, a random torque on each joint up to ``hand`` times its torque
    limit, and lets go (an episode's reset takes it away too). The steps the hand pushes
    are not counted (no command can stop a hand), nor those after it lets go until the
    arm is first clear of the obstacle and the joint limits (the hand may leave it
    there)."""
    rng = np.random.default_rng(seed)
    hand_rng = np.random.default_rng(seed + HAND_SEED_OFFSET)
    hand_limit = hand * np.asarray(env.robot_spec.torque_limit_nm)
    obs, _ = env.reset()
    previous: np.ndarray | None = None
    contacts = violations = 0
    pushed = False  # the hand pushes, or left the arm where it pushed it
    action = np.zeros(env.robot_spec.act_dim, dtype=np.float32)
    for step in range(steps):
        if step % hold_steps == 0:
            action = rng.uniform(-1.0, 1.0, env.robot_spec.act_dim).astype(np.float32)
        if hand > 0.0 and step % HAND_PERIOD == HAND_PERIOD - HAND_STEPS:
            env.set_external_torque(hand_rng.uniform(-1.0, 1.0, len(hand_limit)) * hand_limit)
            pushed = True
        elif hand > 0.0 and step % HAND_PERIOD == 0:
            env.set_external_torque(None)
        executed = action
        if supervisor is not None:
            executed, _ = supervisor.filter(obs, action, previous)
            previous = executed
        obs, _, terminated, truncated, info = env.step(executed)
        contact, violation = bool(info["obstacle_contact"]), bool(info["joint_limit_violation"])
        if pushed and step % HAND_PERIOD < HAND_PERIOD - HAND_STEPS:
            pushed = contact or violation  # let go; its doing until the arm is clear
        if not pushed:
            contacts += contact
            violations += violation
        if terminated or truncated:
            obs, _ = env.reset()
            previous = None
    return contacts, violations
