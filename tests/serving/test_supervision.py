"""The degradation level serving supervises at: cached, yet never behind a degradation."""

from __future__ import annotations

import time

import numpy as np

from tests.serving.serving_harness import MakeServer, relaxed_limits, server_config
from tether.safety import PASSED, Supervisor
from tether.safety.degradation import DegradationMachine
from tether.safety.degradation_config import DegradationConfig
from tether.safety.levels import DegradationLevel, EventKind
from tether.serving.client import PolicyClient
from tether.serving.supervision import SessionSupervisor, SupervisorFactory
from tether.spec import RobotSpec


def _steps(machine: DegradationMachine, robot: str = "") -> None:
    """A full window of passed steps at 50 Hz (500): one NaN among them is RESTRICTED."""
    for _ in range(500):
        machine.observe(PASSED, robot=robot)


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_degradation_reaches_the_next_read_however_long_the_poll_period(
    arm: RobotSpec,
) -> None:
    machine = DegradationMachine(limits=relaxed_limits(arm), clock=ManualClock())
    factory = SupervisorFactory(arm, limits=relaxed_limits(arm), degradation=machine,
                                level_poll_s=3600.0)  # fmt: skip
    assert factory.level() is DegradationLevel.NORMAL
    _steps(machine)
    machine.report(EventKind.NAN_OUTPUT)  # one NaN from the policy: RESTRICTED
    assert factory.level() is DegradationLevel.RESTRICTED
    machine.escalate(DegradationLevel.TAKEOVER, reason="operator e-stop")
    assert factory.level() is DegradationLevel.TAKEOVER
    machine.resume(operator="ada")
    assert factory.level() is machine.level


def test_a_recovery_on_the_clock_is_seen_within_the_poll_period(arm: RobotSpec) -> None:
    clock = ManualClock()
    machine = DegradationMachine(limits=relaxed_limits(arm), clock=clock)
    factory = SupervisorFactory(arm, limits=relaxed_limits(arm), degradation=machine,
                                level_poll_s=0.05)  # fmt: skip
    _steps(machine)
    machine.report(EventKind.NAN_OUTPUT)
    assert factory.level() is DegradationLevel.RESTRICTED
    # The machine recovers only when asked after its quiet period: serving asks again at
    # most level_poll_s later, and until then keeps the more restrictive level.
    clock.now = machine.config.window_s + machine.config.quiet_period_s + 1.0
    assert factory.level() is DegradationLevel.RESTRICTED
    time.sleep(0.06)
    assert factory.level() is DegradationLevel.NORMAL


def test_without_a_machine_the_level_is_normal(arm: RobotSpec) -> None:
    assert SupervisorFactory(arm, limits=relaxed_limits(arm)).level() is DegradationLevel.NORMAL


def test_an_escalation_turns_the_very_next_reply_into_the_backup(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    """Safety: once the machine is at TAKEOVER, no request gets the policy's action, even
    with the cached level (the default poll period) and a lone robot's inline path."""
    machine = DegradationMachine(limits=relaxed_limits(arm))
    supervisors = SupervisorFactory(arm, limits=relaxed_limits(arm), degradation=machine)
    running = make_server(server_config(), supervisors=supervisors)
    obs = np.zeros(arm.obs_dim, np.float32)
    with PolicyClient(running.address) as client:
        before = [client.get_action(obs, deterministic=True) for _ in range(3)]
        machine.escalate(DegradationLevel.TAKEOVER, reason="test")
        after = client.get_action(obs, deterministic=True)
    assert all(r.verdict is not None and r.verdict.source != "backup" for r in before)
    assert after.verdict is not None
    assert after.verdict.source == "backup"
    assert after.degradation == int(DegradationLevel.TAKEOVER)


def test_a_session_keeps_its_learnt_load_across_levels() -> None:
    """One robot, supervised under the NORMAL and then the RESTRICTED limits (a level
    change, or a canary's tightened steps): the payload the supervisor learnt holding
    the drifted arm must carry over. A supervisor switched in fresh knows no payload, and
    a fresh supervisor on the drifted arm let the shipped policy rest against the
    obstacle (tests/safety/test_pretrained_policy.py)."""
    from tether.sim import ArmDynamics, ArmEnv, ArmEnvConfig, DriftSchedule, arm_spec

    drifted = DriftSchedule.demo(start_step=0, ramp_steps=2).dynamics_at(10, ArmDynamics.nominal())
    # The torque supervisor learns a load; the torque interface is the arm's second one.
    spec = arm_spec("torque")
    factory = SupervisorFactory(spec)
    session = factory()
    env = ArmEnv(dynamics=drifted, seed=3, config=ArmEnvConfig(command_interface="torque"))
    obs, _ = env.reset(seed=3)
    previous = None
    zeros = np.zeros(spec.act_dim, dtype=np.float32)
    for _ in range(60):  # the backup holds the arm; the sag it leaves teaches the load
        previous, _ = session.decide(obs, zeros, previous, observation_age_s=0.0,
                                     level=DegradationLevel.TAKEOVER, policy_version=1)  # fmt: skip
        obs, *_ = env.step(previous)
    learnt = session._base.load_estimate
    assert max(abs(x) for x in learnt) > 0.02, learnt  # the payload is visible
    session.decide(obs, zeros, previous, observation_age_s=0.0,
                   level=DegradationLevel.RESTRICTED, policy_version=1)  # fmt: skip
    carried = session._tight().load_estimate
    assert np.allclose(carried, learnt, atol=0.05), (carried, learnt)


def test_watchdog_misses_of_a_sessions_start_up_steps_do_not_degrade(arm: RobotSpec) -> None:
    """`tether run` went RESTRICTED 6 s in on misses from start-up work, not the policy."""
    limits = relaxed_limits(arm)
    config = DegradationConfig(session_warmup_steps=50)
    machine = DegradationMachine(config, limits=limits, clock=ManualClock())
    session = SessionSupervisor(Supervisor(limits), machine, "arm-1")
    _steps(machine, "arm-1")
    for step in range(1, 51):  # the warm-up: every step a miss
        session.watchdog_misses(1, policy_version=1, session_step=step)
    assert machine.level_of("arm-1") is DegradationLevel.NORMAL
    session.watchdog_misses(30, policy_version=1, session_step=51)  # 6 %
    assert machine.level_of("arm-1") is DegradationLevel.RESTRICTED
    # Without the grace the very first step's misses would have degraded the robot.
    strict = DegradationMachine(
        DegradationConfig(session_warmup_steps=0), limits=limits, clock=ManualClock()
    )
    _steps(strict, "arm-1")
    SessionSupervisor(Supervisor(limits), strict, "arm-1").watchdog_misses(
        30, policy_version=1, session_step=1
    )
    assert strict.level_of("arm-1") is DegradationLevel.RESTRICTED


def test_a_sessions_watchdog_misses_move_only_its_own_robot(arm: RobotSpec) -> None:
    """One client's claimed misses put every robot of the server in TAKEOVER."""
    limits = relaxed_limits(arm)
    machine = DegradationMachine(limits=limits, clock=ManualClock())
    factory = SupervisorFactory(arm, limits=limits, degradation=machine)
    liar, bystander = factory("liar"), factory("bystander")
    _steps(machine, "liar")
    _steps(machine, "bystander")
    liar.watchdog_misses(10_000, policy_version=1, session_step=10_000)
    assert liar.level() is DegradationLevel.TAKEOVER
    assert bystander.level() is DegradationLevel.NORMAL
    obs = np.zeros(arm.obs_dim, np.float32)
    _, verdict = bystander.decide(obs, np.zeros(arm.act_dim, np.float32), None,
                                  observation_age_s=0.0, level=bystander.level(),
                                  policy_version=1)  # fmt: skip
    assert verdict.source != "backup"


def test_a_position_session_keeps_its_last_command_across_levels() -> None:
    """The position supervisor's robot state (its last command and that command's change)
    crosses a level change: the RESTRICTED supervisor continues the command the NORMAL
    one returned, so the acceleration check sees the command's true last change."""
    from tether.safety.position import PositionActionSupervisor
    from tether.sim import ArmEnv, ArmEnvConfig, arm_spec

    spec = arm_spec("position")
    session = SupervisorFactory(spec)()
    assert isinstance(session._base, PositionActionSupervisor)
    env = ArmEnv(seed=3, config=ArmEnvConfig(command_interface="position"))
    obs, _ = env.reset(seed=3)
    target = np.ones(spec.act_dim, dtype=np.float32)  # far away: corrected every step
    previous = None
    for _ in range(5):
        previous, _ = session.decide(obs, target, previous, observation_age_s=0.0,
                                     level=DegradationLevel.NORMAL, policy_version=1)  # fmt: skip
        obs, *_ = env.step(previous)
    session.decide(obs, target, previous, observation_age_s=0.0,
                   level=DegradationLevel.RESTRICTED, policy_version=1)  # fmt: skip
    tight = session._tight()
    assert isinstance(tight, PositionActionSupervisor)
    assert tight.position._last is not None
    assert tight._last_command is not None
