"""The asyncio client and the simulated robot against a real server."""

from __future__ import annotations

import asyncio

import numpy as np

from tests.serving.serving_harness import MakeServer
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
    running = make_server(record_step=records.append)
    env = ArmEnv(seed=1)
    with PolicyClient(running.address) as client:
        robot = SimRobotClient(
            client, env=env, control_rate_hz=0, control_deadline_s=5.0, deterministic=True
        )
        stats = robot.run(40)
    assert stats.steps == 40
    assert stats.watchdog_misses == 0
    assert stats.round_trip_p50_s > 0
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
