"""A simulated robot's episodes: the fixed task cycle that makes returns comparable."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tether.runtime.config import FleetConfig
from tether.runtime.robot import _TASK_REPEATS, RobotPlan, _TaskCycle
from tether.serving.client.options import ClientOptions
from tether.sim import ArmEnv, DriftSchedule


def _plan(seed: int, task_seeds: tuple[int, ...]) -> RobotPlan:
    return RobotPlan(
        robot_id=f"robot-{seed}",
        role="learning",
        address="127.0.0.1:1",
        run_dir=Path("."),
        seed=seed,
        task_seeds=task_seeds,
        control_rate_hz=50.0,
        fast=True,
        deterministic=False,
        duration_s=1.0,
        drift=DriftSchedule(),
        pin_version=None,
        client=ClientOptions(),
        parent_pid=os.getpid(),
    )


def _starts(plan: RobotPlan, episodes: int, ids: list[str] | None = None) -> list[np.ndarray]:
    env = ArmEnv(seed=plan.seed)
    tasks = _TaskCycle(plan)
    out = []
    for k in range(episodes):
        obs, _ = tasks.reset(env, k)
        env.step(np.full(4, 0.5))  # the episode's own steps must not shift the next task
        out.append(obs)
        if ids is not None:
            ids.append(tasks.task_id)
    return out


def test_every_robot_cycles_through_the_same_tasks() -> None:
    tasks = FleetConfig(tasks=3).task_seeds()
    n, r = 14, _TASK_REPEATS
    ids_a: list[str] = []
    ids_b: list[str] = []
    a = _starts(_plan(0, tasks), n, ids_a)
    b = _starts(_plan(1, tasks), n, ids_b)
    assert ids_a == ids_b  # both robots declare the same tasks
    for k in range(n):
        np.testing.assert_array_equal(a[k], b[k])  # same task on both robots
        np.testing.assert_array_equal(a[k], a[k % (3 * r)])  # the cycle wraps
        np.testing.assert_array_equal(a[k], a[k - k % r])  # each task runs r times in a row
        assert ids_a[k] == ids_a[k - k % r]
    assert not np.array_equal(a[0][11:14], a[r][11:14])  # distinct targets in the cycle
    assert ids_a[0] != ids_a[r]


def test_without_a_task_cycle_every_episode_draws_a_fresh_task() -> None:
    assert FleetConfig(tasks=0).task_seeds() == ()
    ids: list[str] = []
    starts = _starts(_plan(0, ()), 6 * _TASK_REPEATS, ids)
    targets = {tuple(np.round(s[11:14], 6)) for s in starts}
    assert len(targets) == 6  # a fresh task per turn, each run _TASK_REPEATS times
    assert len(set(ids)) == 6
