"""The asyncio client and the simulated robot against a real server."""

from __future__ import annotations

import asyncio

import numpy as np

from tests.serving.serving_harness import MakeServer
from tether.data.columns import TransitionTable
from tether.data.records import Transition
from tether.policy.engine import PolicyEngine
from tether.serving.client import AsyncPolicyClient, PolicyClient
from tether.serving.client.sim_robot import SimRobotClient
from tether.sim import ArmEnv
from tether.spec import RobotSpec


def test_async_client_matches_the_blocking_one(
    make_server: MakeServer, engine: PolicyEngine, arm: RobotSpec
) -> None:
    running = make_server(engine=engine)
    obs = np.linspace(-0.2, 0.2, arm.obs_dim).astype(np.float32)
    with PolicyClient(running.address) as client:
        blocking = client.get_action(obs, deterministic=True)

    async def run() -> tuple[np.ndarray, list[bool], str]:
        async with AsyncPolicyClient(running.address) as client:
            unary = await client.get_action(obs, deterministic=True)
            described = await client.describe()
            async with await client.session(arm, control_deadline_s=5.0) as session:
                steps = [await session.step(obs, deterministic=True) for _ in range(3)]
                session.watchdog.control_deadline_s = 1e-6  # no reply can make it now
                missed = await session.step(obs)
            assert missed.from_watchdog
            assert missed.reason == "control deadline passed"
            return unary.action, [s.from_watchdog for s in steps], described.status

    action, watchdog_flags, status = asyncio.run(run())
    np.testing.assert_array_equal(action, blocking.action)
    assert watchdog_flags == [False, False, False]
    assert status == "serving"


def test_sim_robot_runs_episodes_through_a_session(make_server: MakeServer, arm: RobotSpec) -> None:
    from tether.data.step import StepRecord

    records: list[StepRecord] = []
    running = make_server(record_steps=lambda block: records.extend(block.records()))
    env = ArmEnv(seed=1)
    with PolicyClient(running.address) as client:
        robot = SimRobotClient(
            client, env=env, control_rate_hz=0, control_deadline_s=5.0, deterministic=True
        )
        stats = robot.run(40)
    assert stats.steps == 40
    assert stats.watchdog_misses == 0
    assert stats.round_trip_p50_s > 0
    # The batch that answers a step records it before the reply goes out: every step the
    # robot was answered is recorded by the time it returns.
    assert len(records) == 40
    assert all(np.all(np.isfinite(r.safe_action)) for r in records)
    # Rewards arrive one step late: the reward of step t's action comes with step t+1.
    assert records[0].reward == 0.0
    assert any(r.reward != 0.0 for r in records[1:])


def test_sim_robot_keeps_its_control_rate(make_server: MakeServer, arm: RobotSpec) -> None:
    running = make_server()
    with PolicyClient(running.address) as client:
        robot = SimRobotClient(client, control_rate_hz=50.0, control_deadline_s=5.0)
        stats = robot.run(10)
    # 10 steps at 50 Hz take at least 9 periods (the first is not waited for).
    assert stats.elapsed_s >= 9 * 0.02 - 1e-3


class Collected:
    """The learner's side of the recorder: whatever transitions it hands on."""

    def __init__(self) -> None:
        self.transitions: list[Transition] = []

    def put(self, transitions: TransitionTable) -> None:
        self.transitions.extend(transitions.transitions())


def test_recorded_transitions_pair_each_action_with_its_own_outcome(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    """Sim robot → server → tether.data.Recorder: every transition is (s_t, a_t, r_t, s_t+1)."""
    from tether.data.recorder import Recorder
    from tether.data.step import AnsweredSteps, StepRecord

    sink = Collected()
    recorder = Recorder([sink])
    steps: list[StepRecord] = []

    def record(block: AnsweredSteps) -> None:
        steps.extend(block.records())
        recorder.record_steps(block)

    running = make_server(record_steps=record, end_session=recorder.end_session)
    with PolicyClient(running.address) as client:
        SimRobotClient(client, control_rate_hz=0, control_deadline_s=5.0, seed=2).run(25)
    assert recorder.flush(10)
    recorder.close()
    by_index = {(s.episode_id, s.step_index): s for s in steps}
    assert len(sink.transitions) >= 20
    for tr in sink.transitions:
        now = by_index[(tr.episode_id, tr.step_index)]
        after = by_index[(tr.episode_id, tr.step_index + 1)]
        np.testing.assert_array_equal(tr.observation, now.observation)
        np.testing.assert_array_equal(tr.action, now.safe_action)
        np.testing.assert_array_equal(tr.next_observation, after.observation)
        assert tr.reward == after.reward
        assert tr.policy_version == now.policy_version
