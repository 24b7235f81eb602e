"""An edge's shipper: transitions reach the replay actor in batches, and a slow or dead
replay actor never makes ``put`` (the recorder's call) wait; what does not fit is counted."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tether.data.columns import TransitionArrays, TransitionTable
from tether.data.records import Transition
from tether.fleet.replay import ReplayService
from tether.fleet.shipper import ReplayShipper

pytestmark = pytest.mark.ray

OBS, ACT = 3, 2


def transitions(n: int) -> TransitionTable:
    """``n`` transitions numbered by their reward, as the table the recorder hands over."""
    arrays = TransitionArrays.empty(n, OBS, ACT)
    rows = [
        Transition(
            session_id="s",
            robot_id="robot-0",
            episode_id="e",
            step_index=i,
            observation=arrays.observations[i],
            proposed_action=arrays.proposed_actions[i],
            action=arrays.actions[i],
            reward=float(i),
            next_observation=arrays.next_observations[i],
            terminated=False,
            truncated=False,
            action_source="policy",
            safety_checks=0,
            policy_version=1,
            weights_sha256="0" * 64,
            ingress_ns=i,
            next_ingress_ns=i + 1,
        )
        for i in range(n)
    ]
    return TransitionTable.from_transitions(rows, OBS, ACT)


class GatedReplay(ReplayService):
    """The real replay queue, whose pushes wait until the test opens the gate."""

    def __init__(self, obs_dim: int, act_dim: int, capacity: int) -> None:
        super().__init__(obs_dim, act_dim, capacity)
        self._open = threading.Event()

    def open(self) -> None:
        self._open.set()

    def push(self, edge_id: str, rows: TransitionArrays) -> int:
        self._open.wait(30.0)
        return super().push(edge_id, rows)


def wait_until(check: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_stalled_replay_actor_defers_then_drops_a_dead_one_fails_and_put_never_waits(
    ray_session: Any,
) -> None:
    # One actor for the whole story: each new actor costs a worker start on 2 cores.
    ray = ray_session
    replay = ray.remote(GatedReplay).options(num_cpus=0, max_concurrency=4).remote(OBS, ACT, 10_000)
    shipper = ReplayShipper(
        replay, edge_id="edge-0", obs_dim=OBS, act_dim=ACT, batch=10, in_flight=2, buffer=100
    )
    try:
        shipper.put(transitions(20))  # two batches: every call slot taken, both stalled
        wait_until(lambda: shipper.stats().in_flight == 20)
        slowest = 0.0
        for _ in range(20):
            t = time.perf_counter()
            shipper.put(transitions(10))
            slowest = max(slowest, time.perf_counter() - t)
        stats = shipper.stats()
        assert slowest < 0.05  # the recorder's call returns at once, stalled or not
        assert stats.buffered == 100  # waiting: deferred, not lost
        assert stats.dropped_full == 100  # beyond the buffer: dropped, and counted
        wait_until(lambda: shipper.stats().deferred > 0)
        ray.get(replay.open.remote())
        wait_until(lambda: shipper.stats().shipped == 120)
        final = shipper.stats()
        assert final.offered == final.shipped + final.dropped_full + final.failed
        assert ray.get(replay.stats.remote()).offered == 120
        # What arrived is what was kept: the first 120 rows offered (the two stalled calls
        # may land in either order on this concurrent test actor).
        got = ray.get(replay.pull.remote(1000))
        expected = [*range(20), *[r for _ in range(10) for r in range(10)]]
        assert sorted(got.rewards.tolist()) == sorted(expected)
        # A dead replay actor: the rows are counted as failed, nothing raises.
        ray.kill(replay)
        assert shipper.put(transitions(30)) == 30
        wait_until(lambda: shipper.stats().failed == 30)
    finally:
        shipper.close(timeout_s=1.0)
        ray.kill(replay)
