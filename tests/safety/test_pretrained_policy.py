"""Pretrained policies on the built-in MuJoCo arm, with and without the supervisor.

A uniformly random policy (``test_physics.py``) rarely moves fast; the adversary
(``adversary.py``, a bundle pretrained without the supervisor) drives the arm hard, to
joint limits and past the obstacle. Through the supervisor it
must never touch the obstacle nor violate a joint limit, on the nominal arm and on the
fully drifted one (weaker actuators, an unknown payload, a step of command delay),
deterministic or sampled; without the supervisor it does both kinds of harm, so these
tests can fail. The supervisor must also leave the policy able to do its task.
Violations are what ``ArmEnv`` measures from the physics, not what the supervisor
believes.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest
import torch

from tests.safety.adversary import load_adversary
from tether.assets import load_pretrained_bundle
from tether.policy import EngineConfig, PolicyEngine
from tether.safety import ActionSource, Supervisor, SupervisorConfig
from tether.safety.presets import (
    ARM_LIMITS_CONFIG,
    ARM_OBSTACLE_MARGIN_M,
    arm_limits,
    arm_supervisor,
)
from tether.sim import ArmDynamics, ArmEnv, DriftSchedule
from tether.sim.config import ArmEnvConfig

# These tests exercise the torque interface, the arm's second command interface.
# Whole 200-step episodes: the corrected fraction below was measured over full horizons
# (an episode that ends once the arm settles drops its quiet tail).
TORQUE = ArmEnvConfig(command_interface="torque", end_when_settled=False)
# The recorded cases below replay task sequences drawn when targets cleared the obstacle
# by 5 cm (the sampler keeps 8 cm now, which draws other targets for some seeds).
RECORDED = TORQUE.model_copy(update={"target_obstacle_clearance_m": 0.05})

# Episode seeds (ArmEnv.reset): 32 draws a target past the obstacle, where the policy
# swings the arm through it; with only the end of the predicted braking path checked,
# the supervised arm touched the obstacle there for about 170 of its 200 steps.
EPISODE_SEEDS = (0, 1, 2, 3, 4, 32)
STEPS = 200  # one full episode of ArmEnv
NOMINAL = ArmDynamics.nominal()
# The demo drift at its end: every knob at its final value from the first step.
DRIFTED = DriftSchedule.demo(start_step=0, ramp_steps=2).dynamics_at(10, NOMINAL)
# The arm preset before its obstacle margin grew to ARM_OBSTACLE_MARGIN_M.
_MARGIN_3CM = arm_limits(ARM_LIMITS_CONFIG.model_copy(update={"obstacle_margin_m": 0.03}))


class Outcome(NamedTuple):
    contacts: int  # control steps with an obstacle contact
    limit_violations: int  # control steps with a joint beyond its range
    interventions: int  # actions the supervisor changed or replaced
    steps: int
    successes: int  # episodes that reached their target


@pytest.fixture(scope="module")
def engine() -> PolicyEngine:
    torch.set_num_threads(1)
    return PolicyEngine(load_adversary(), EngineConfig(execution="eager"))


@pytest.fixture(scope="module")
def shipped() -> PolicyEngine:
    torch.set_num_threads(1)
    return PolicyEngine(
        load_pretrained_bundle(command_interface="torque"), EngineConfig(execution="eager")
    )


def _run(
    engine: PolicyEngine, supervisor: Supervisor | None, dynamics: ArmDynamics, deterministic: bool
) -> Outcome:
    env = ArmEnv(config=TORQUE, dynamics=dynamics, seed=1)
    contacts = violations = interventions = steps = successes = 0
    for seed in EPISODE_SEEDS:
        obs, _ = env.reset(seed=seed)
        previous: np.ndarray | None = None
        success = False
        for _ in range(STEPS):
            action = engine.act(obs[None].astype(np.float32), deterministic).actions[0]
            if supervisor is not None:
                action, verdict = supervisor.filter(obs, action, previous)
                interventions += verdict.source is not ActionSource.POLICY
                previous = action
            obs, _, terminated, truncated, info = env.step(action)
            steps += 1
            contacts += bool(info["obstacle_contact"])
            violations += bool(info["joint_limit_violation"])
            success = success or bool(info["success"])
            if terminated or truncated:
                break
        successes += success
    return Outcome(contacts, violations, interventions, steps, successes)


# The adversary, and the bundle tether run starts from (whatever it is): the same guarantee.
@pytest.mark.parametrize("policy", ["engine", "shipped"], ids=["adversary", "shipped"])
@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "sampled"])
@pytest.mark.parametrize("dynamics", [NOMINAL, DRIFTED], ids=["nominal", "drifted"])
def test_through_the_supervisor_the_policy_never_touches_or_violates(
    request: pytest.FixtureRequest, policy: str, dynamics: ArmDynamics, deterministic: bool
) -> None:
    engine: PolicyEngine = request.getfixturevalue(policy)
    outcome = _run(engine, arm_supervisor(), dynamics, deterministic)
    assert (outcome.contacts, outcome.limit_violations) == (0, 0), outcome


def test_without_the_supervisor_the_same_policy_violates_limits_and_touches(
    engine: PolicyEngine,
) -> None:
    # It drives joints into their end stops on about a third of its steps; on the drifted
    # arm (weaker, loaded, late) it also swings into the obstacle (measured: 160 steps).
    nominal = _run(engine, None, NOMINAL, deterministic=True)
    assert nominal.limit_violations > nominal.steps // 10, nominal
    drifted = _run(engine, None, DRIFTED, deterministic=True)
    assert drifted.contacts > 0, drifted
    assert drifted.limit_violations > 0, drifted


def test_the_supervisor_leaves_the_policy_able_to_do_its_task(engine: PolicyEngine) -> None:
    guarded = _run(engine, arm_supervisor(), NOMINAL, deterministic=True)
    free = _run(engine, None, NOMINAL, deterministic=True)
    # Capping commands at the braking deceleration corrected every action and the arm
    # never reached a target. What is still corrected is mostly the policy's own excess:
    # it leaves joint limits and velocity limits on a third and a seventh of its steps
    # unsupervised, and braking may rely only on the declared deceleration. Measured:
    # 44 % of these steps corrected (59 % over episode seeds 0-19); 56 % (77 %) with the
    # undamped one-step model, which held the joints to a fifth to a half of their
    # velocity limits (test_damping.py); 100 % with the old preset.
    assert guarded.interventions < 0.5 * guarded.steps, guarded
    assert guarded.successes >= free.successes - 1, (guarded, free)


@pytest.mark.parametrize("episode_seed", [6, 9, 18, 19])
def test_an_arm_at_rest_that_pushes_toward_the_obstacle_is_slowed_not_frozen(
    engine: PolicyEngine, episode_seed: int
) -> None:
    # In these episodes the arm starts about 0.2 m from the obstacle and the policy keeps
    # pushing toward it. At full speed the predicted stop (at the declared braking
    # deceleration) lies past the obstacle; braking the whole action instead held the arm
    # at rest for the whole episode. Backing off to the largest clear fraction lets it
    # move, as slowly as it must, without touching (measured: 0.55-0.91 m in 100 steps,
    # at the 3 cm obstacle margin the arm preset had then).
    moved = {}
    for steps in (0, 3):
        supervisor = arm_supervisor(_MARGIN_3CM, config=SupervisorConfig(sweep_backoff_steps=steps))
        env = ArmEnv(config=TORQUE, seed=1)
        obs, _ = env.reset(seed=episode_seed)
        start = env.true_state().end_effector_m
        previous: np.ndarray | None = None
        for _ in range(100):
            action = engine.act(obs[None].astype(np.float32), True).actions[0]
            previous, _ = supervisor.filter(obs, action, previous)
            obs, _, _, _, info = env.step(previous)
            assert not info["obstacle_contact"]
        moved[steps] = float(np.linalg.norm(env.true_state().end_effector_m - start))
    assert moved[0] < 1e-3, moved
    assert moved[3] > 0.3, moved


@pytest.mark.parametrize(
    ("config", "safe"),
    [
        (SupervisorConfig(), True),
        (SupervisorConfig(sweep_backoff_steps=3), False),
        (SupervisorConfig(load_learning_speed_fraction=0.25), False),
    ],
    ids=["default", "backoff", "slow-load-learning"],
)
def test_sampled_on_the_drifted_arm_near_the_obstacle(config: SupervisorConfig, safe: bool) -> None:
    # A fresh supervisor on the drifted arm (weaker, carrying a payload it has not yet
    # learnt, a step late), in two episodes where the sampled policy swings the arm at
    # the obstacle. The defaults keep it clear. Two tempting options did not, which is
    # why both are off: backing a breaching action off to the largest fraction whose
    # predicted path is clear leaves no slack for what the one-step model misses, and
    # learning the load only from nearly-still stops learns the payload too late; with
    # either the arm came to rest against the obstacle (measured: about 185 contact
    # steps in an episode). Measured at the 3 cm margin the arm preset had then (its 6 cm
    # now also hides these two cases). The engine is seeded: the samples decide.
    engine = PolicyEngine(load_adversary(), EngineConfig(execution="eager", seed=0))
    supervisor = arm_supervisor(_MARGIN_3CM, config=config)
    env = ArmEnv(config=RECORDED, dynamics=DRIFTED, seed=11)
    contacts = 0
    for seed in (1008, 1012):
        obs, _ = env.reset(seed=seed)
        previous: np.ndarray | None = None
        for _ in range(STEPS):
            action = engine.act(obs[None].astype(np.float32), False).actions[0]
            previous, _ = supervisor.filter(obs, action, previous)
            obs, _, _, _, info = env.step(previous)
            contacts += bool(info["obstacle_contact"])
    assert (contacts == 0) is safe, contacts


@pytest.mark.parametrize("margin", [ARM_OBSTACLE_MARGIN_M, 0.03], ids=["preset", "3cm"])
def test_coupled_chatter_at_the_elbow_limit_stays_clear_of_the_obstacle(margin: float) -> None:
    # tether run's robot-0 (env seed 0), episode 24 of its sequence on the nominal arm:
    # the sampled policy drives the elbow into its lower limit and the wrist to its
    # velocity limit; braked at the weak gain, the elbow reverses at full torque every
    # other step, and the coupling the per-joint model leaves out carried the forearm
    # into the obstacle through the 3 cm margin on every engine seed tried.
    limits = arm_limits(ARM_LIMITS_CONFIG.model_copy(update={"obstacle_margin_m": margin}))
    engine = PolicyEngine(load_adversary(), EngineConfig(execution="eager", seed=0))
    supervisor = arm_supervisor(limits=limits)
    env = ArmEnv(config=RECORDED, dynamics=NOMINAL, seed=0)
    obs, _ = env.reset(seed=0)
    contacts = 0
    for episode in range(24):
        previous: np.ndarray | None = None
        for _ in range(STEPS):
            action = engine.act(obs[None].astype(np.float32), False).actions[0]
            previous, _ = supervisor.filter(obs.astype(np.float32), action, previous)
            obs, _, _, _, info = env.step(previous)
            contacts += bool(info["obstacle_contact"]) and episode == 23
        obs, _ = env.reset()
    if margin == ARM_OBSTACLE_MARGIN_M:
        assert contacts == 0
    else:
        assert contacts > 0, "the 3 cm margin held here: the coupling case is gone?"
