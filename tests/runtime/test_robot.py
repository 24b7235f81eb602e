"""A simulated robot's episodes (the fixed task cycle that makes returns comparable), and
the robots' processes: what one of them holds when it is killed stops no other."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np

from tether.runtime.config import FleetConfig
from tether.runtime.records import RunEvent
from tether.runtime.robot import (
    _TASK_REPEATS,
    RobotPlan,
    RobotProcesses,
    RobotReport,
    StartSignal,
    _TaskCycle,
)
from tether.serving.client.options import ClientOptions
from tether.shared_flag import SharedFlag
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


def _first_killed_mid_write(
    plan: RobotPlan, out: Any, stop: SharedFlag, start: StartSignal
) -> None:
    """robot-0 as it is while its queue's feeder thread writes a record, holding the
    writers' lock (the test then SIGKILLs it); any other robot reports one event once the
    run starts, then exits."""
    if plan.robot_id == "robot-0":
        out._wlock.acquire()
        start.ready()
        stop.wait(120.0)
        return
    start.ready()
    if start.wait(stop) is not None:
        out.put(RunEvent(t_s=0.0, kind="drift", message=plan.robot_id))


def _started_with_the_first_killed(processes: list[Any], all_ready: Any) -> None:
    for p in processes:
        p.start()
    deadline = time.monotonic() + 60.0
    while not all_ready() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all_ready(), "the robots never started"
    os.kill(processes[0].pid, signal.SIGKILL)
    processes[0].join(10.0)


def test_a_robot_killed_mid_write_stops_no_other_robots_reports() -> None:
    robots = RobotProcesses([_plan(0, ()), _plan(1, ())], target=_first_killed_mid_write)
    try:
        _started_with_the_first_killed(robots.processes, robots.all_ready)
        robots.go(time.monotonic())
        got: list[RobotReport] = []
        deadline = time.monotonic() + 30.0
        while not got and time.monotonic() < deadline:
            got = robots.reports()
            time.sleep(0.02)
        assert [r.message for r in got if isinstance(r, RunEvent)] == ["robot-1"]
        robots.processes[1].join(30.0)
        assert robots.processes[1].exitcode == 0, "the reporting robot hung at its exit"
    finally:
        for _ in robots.winding_down(grace_s=5.0):
            time.sleep(0.05)


def test_with_one_queue_for_all_a_robot_killed_mid_write_silences_the_rest() -> None:
    """The hazard ``RobotProcesses`` avoids: one ``multiprocessing.Queue`` shared by the
    robots, whose writers' lock the killed one keeps."""
    ctx = multiprocessing.get_context("spawn")
    queue, stop, start = ctx.Queue(), SharedFlag(ctx), StartSignal(ctx, 2)
    processes = [
        ctx.Process(
            target=_first_killed_mid_write,
            args=(_plan(i, ()), queue, stop, start.for_robot(i)),
            daemon=True,
        )
        for i in range(2)
    ]
    try:
        _started_with_the_first_killed(processes, start.all_ready)
        start.go(time.monotonic())
        processes[1].join(1.5)
        assert queue.empty()  # its record never reached the parent...
        assert processes[1].is_alive()  # ...and its exit waits on its feeder for good
    finally:
        stop.set()
        for p in processes:
            p.kill()
            p.join(5.0)
