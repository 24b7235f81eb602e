"""On the built-in MuJoCo arm commanded by position, a uniformly random command policy
(``random_commands``) never violates a joint limit or touches the obstacle when the
supervisor filters it, on the nominal arm and on the fully drifted one, and does both
without it. The 10,000-step runs are marked slow; a 2,000-step run of each case stays in
the default suite. ``benchmarks/bench_contacts.py`` runs the same over many seeds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from safety.random_commands import ARMS, HOLD_STEPS, random_command_run
from tether.safety.for_spec import supervisor_for
from tether.safety.position import kernel
from tether.safety.position.actions import _command_range
from tether.safety.position.envelope import CommandEnvelope, JointResult
from tether.safety.position.supervisor import PositionSupervisor
from tether.safety.verdict import SafetyCheck
from tether.sim import ArmEnv, ArmEnvConfig, arm_spec

CLEARANCE = SafetyCheck.OBSTACLE | SafetyCheck.WORKSPACE
LONG_RUNS = [(arm, seed) for arm in ("nominal", "drifted") for seed in range(5)]


@pytest.mark.parametrize("arm", sorted(ARMS))
def test_short_random_command_run_is_safe_with_the_supervisor_and_not_without(arm: str) -> None:
    supervised = random_command_run(ARMS[arm], supervisor_for(arm_spec("position")), 2000, seed=3)
    assert supervised == (0, 0)
    contacts, violations = random_command_run(ARMS[arm], None, 2000, seed=3)
    assert contacts > 0
    assert violations > 0


def test_a_sagging_arm_is_judged_where_it_settles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drifted seed 125 rests below its commands under its payload; judged by the
    straight segment to the command alone, it touched the obstacle on 49 steps of 2,000
    (the sag learning switched off, and the way out of a margin, which brings the sunk
    arm back out too, on the Python path); judged where it settles, never."""
    spec = arm_spec("position")
    assert random_command_run(ARMS["drifted"], supervisor_for(spec), 2000, seed=125) == (0, 0)
    monkeypatch.setattr(kernel, "ENABLED", False)
    monkeypatch.setattr(kernel, "RETREAT_RAD", 0.0)
    monkeypatch.setattr(PositionSupervisor, "_learn_sag", lambda *args: None)
    contacts, _ = random_command_run(ARMS["drifted"], supervisor_for(spec), 2000, seed=125)
    assert contacts > 0


def test_a_hand_that_held_the_arm_leaves_no_sag_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """A person's hand pushes the nominal arm for 40 of every 120 steps and lets go
    (``random_commands``, seed 8): the offset the arm showed at rest under the hand is its
    sag only while it stays at that place, and after it leaves, what that place and the
    place before agree on. Kept as the sag until the next rest (every place taken as one,
    on the Python path), it made the supervisor judge the released arm's commands where
    the hand had held it, and the arm touched the obstacle on 41 steps of 2,000."""
    spec = arm_spec("position")
    supervised = random_command_run(ARMS["nominal"], supervisor_for(spec), 2000, seed=8, hand=0.4)
    assert supervised == (0, 0)
    monkeypatch.setattr(kernel, "ENABLED", False)
    monkeypatch.setattr(kernel, "REST_APART_RAD", math.inf)
    contacts, _ = random_command_run(ARMS["nominal"], supervisor_for(spec), 2000, seed=8, hand=0.4)
    assert contacts > 0


def test_a_weak_arm_a_hand_left_on_the_obstacle_is_brought_off_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hand pushes the drifted arm onto the obstacle and lets go (``random_commands``,
    seed 29): deep inside the margin, the weak arm's held command left it resting there,
    touching the obstacle on 42 steps of 2,000 (no way out taken: a step of 0, on the
    Python path). The previous command moved part of the way out each step brings it off."""
    spec = arm_spec("position")
    supervised = random_command_run(ARMS["drifted"], supervisor_for(spec), 2000, seed=29, hand=0.4)
    assert supervised == (0, 0)
    monkeypatch.setattr(kernel, "ENABLED", False)
    monkeypatch.setattr(kernel, "RETREAT_RAD", 0.0)
    contacts, _ = random_command_run(ARMS["drifted"], supervisor_for(spec), 2000, seed=29, hand=0.4)
    assert contacts > 0


def test_a_weak_arm_resting_beyond_its_command_stays_off_a_joint_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Drifted seed 178 rests 0.08 rad beyond its shoulder command held at the margin
    (1.8 rad); a swing of the elbow and wrist then carried it to its 1.9 rad limit, 13
    steps over it by step 3,730, with the joint range judged at the command (the sag
    left out of the joint checks, on the Python path). Judged where the arm settles,
    never."""
    spec = arm_spec("position")
    assert random_command_run(ARMS["drifted"], supervisor_for(spec), 3730, seed=178) == (0, 0)
    monkeypatch.setattr(kernel, "ENABLED", False)
    clip = CommandEnvelope.clip

    def at_the_command(self: CommandEnvelope, *args: Any, exact: bool = True) -> JointResult:
        *state, sag = args
        return clip(self, *state, [0.0] * len(sag), exact=exact)

    monkeypatch.setattr(CommandEnvelope, "clip", at_the_command)
    _, violations = random_command_run(ARMS["drifted"], supervisor_for(spec), 3730, seed=178)
    assert violations > 0


def test_a_stop_outside_the_rate_limits_is_held_not_carried_on() -> None:
    """Where the obstacle check stops a command outside the rate limits (a jump back to the
    held command or the pose), the next command stays within the acceleration step of
    that stop, unless the clearance stops it too (it then carries an obstacle or
    workspace bit: the pose the arm coasts through is held again). Judged against the
    jump, the commands carried on in its direction at the velocity limit, and on drifted
    seed 0 the arm followed them into the obstacle."""
    spec = arm_spec("position")
    supervisor = supervisor_for(spec)
    limits = supervisor.limits
    dt = limits.control_period_s
    velocity_step = np.asarray(limits.velocity_limit_rad_s) * dt
    accel_step = np.asarray(limits.acceleration_limit_rad_s2) * dt * dt
    low, high = (np.asarray(x, dtype=np.float64) for x in _command_range(spec))
    center, half = (low + high) / 2, (high - low) / 2
    env = ArmEnv(
        dynamics=ARMS["drifted"], seed=0, config=ArmEnvConfig(command_interface="position")
    )
    rng = np.random.default_rng(0)
    obs, _ = env.reset()
    previous: np.ndarray | None = None
    last: np.ndarray | None = None  # the last command (rad)
    stopped = False  # the last command jumped outside the rate limits
    stops = 0
    for step in range(3200):
        if step % HOLD_STEPS == 0:
            proposal = rng.uniform(-1.0, 1.0, spec.act_dim).astype(np.float32)
        action, verdict = supervisor.filter(obs, proposal, previous)
        previous = action
        command = center + half * action.astype(np.float64)
        if last is not None:
            moved = np.abs(command - last)
            jump = bool(np.any(moved > velocity_step + 1e-5))
            if stopped and np.any(moved > accel_step + 1e-5):
                assert verdict.checks & CLEARANCE, (step, command, last)
                jump = True
            stopped = jump
            stops += jump
        last = command
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset()
            previous = last = None
            stopped = False
    assert stops > 0


@pytest.mark.slow
@pytest.mark.parametrize(("arm", "seed"), LONG_RUNS)
def test_random_command_policy_for_10000_steps(arm: str, seed: int) -> None:
    supervised = random_command_run(
        ARMS[arm], supervisor_for(arm_spec("position")), 10_000, seed=seed
    )
    assert supervised == (0, 0)
    contacts, violations = random_command_run(ARMS[arm], None, 10_000, seed=seed)
    assert contacts > 0
    assert violations > 0
