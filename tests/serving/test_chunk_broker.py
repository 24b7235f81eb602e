"""ActionChunkBroker: one step per cycle, prefetch, and never a stale step."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.serving.serving_harness import MakeServer
from tether.policy.engine import PolicyEngine
from tether.serving.client import ActionChunk, ActionChunkBroker, PolicyClient
from tether.spec import RobotSpec

PERIOD = 0.02
STALE = 0.015


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class ChunkServer:
    """A fetch function: chunk number c has rows [c*10 + i], observed at the clock's time."""

    def __init__(self, clock: Clock, horizon: int) -> None:
        self.clock = clock
        self.horizon = horizon
        self.calls = 0
        self.release = threading.Event()
        self.release.set()

    def __call__(self, observation: np.ndarray) -> ActionChunk:
        observed = self.clock()
        self.release.wait(10)
        c = self.calls
        self.calls += 1
        rows = np.array([[c * 10 + i] for i in range(self.horizon)], np.float32)
        return ActionChunk(rows, observed)


def wait_for_fetch(broker: ActionChunkBroker) -> None:
    pending = broker._pending
    if pending is not None:
        pending.result(10)


def test_steps_run_in_order_and_the_next_chunk_is_fetched_ahead() -> None:
    clock = Clock()
    server = ChunkServer(clock, horizon=4)
    with ActionChunkBroker(server, step_period_s=PERIOD, staleness_s=STALE, clock=clock) as broker:
        got = []
        for _ in range(3):
            step = broker.act(np.zeros(3))
            got.append((step.step_index, float(step.action[0])))
            clock.now += PERIOD
        assert got == [(0, 0.0), (1, 1.0), (2, 2.0)]
        # The prefetch started at step 2 (one step before the end), from that cycle's state.
        assert server.calls == 2
        wait_for_fetch(broker)
        # The fresh chunk replaces the old one as soon as it is there, at the step due now
        # (observed one period ago: its step 1), not at its stale step 0.
        step = broker.act(np.zeros(3))
        assert (step.step_index, float(step.action[0])) == (1, 11.0)


def test_after_a_stall_late_steps_are_skipped_and_a_fresh_chunk_is_fetched() -> None:
    clock = Clock()
    server = ChunkServer(clock, horizon=5)
    with ActionChunkBroker(
        server, step_period_s=PERIOD, staleness_s=STALE, prefetch_steps=0, clock=clock
    ) as broker:
        assert broker.act(np.zeros(3)).step_index == 0
        clock.now += 3 * PERIOD + 0.001  # the robot stalled for three cycles
        step = broker.act(np.zeros(3))
        assert step.step_index == 3  # steps 1 and 2 are past: never executed late
        clock.now += 10 * PERIOD  # past the whole chunk: fetched now, from this state
        step = broker.act(np.zeros(3))
        assert (step.step_index, float(step.action[0])) == (0, 10.0)
        assert server.calls == 2


def test_a_chunk_that_arrives_later_than_the_staleness_limit_gives_no_action() -> None:
    clock = Clock()

    def slow(observation: np.ndarray) -> ActionChunk:
        observed = clock()
        clock.now += 2 * STALE  # the round trip outlasted the limit
        return ActionChunk(np.ones((1, 1), np.float32), observed)

    with ActionChunkBroker(slow, step_period_s=PERIOD, staleness_s=STALE, clock=clock) as broker:
        step = broker.act(np.zeros(3))
    assert step.action is None
    assert "more than staleness_s" in step.reason


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.0, 0.08), min_size=1, max_size=40), st.integers(1, 6))
def test_no_returned_step_is_ever_older_than_the_staleness_limit(
    gaps: list[float], horizon: int
) -> None:
    clock = Clock()
    server = ChunkServer(clock, horizon=horizon)
    with ActionChunkBroker(server, step_period_s=PERIOD, staleness_s=STALE, clock=clock) as broker:
        last: dict[int, int] = {}  # chunk -> the last step index returned from it
        for gap in gaps:
            clock.now += gap
            wait_for_fetch(broker)
            step = broker.act(np.zeros(3))
            if step.action is None:
                continue
            assert step.chunk is not None
            due = step.chunk.observed_at_s + step.step_index * PERIOD
            assert clock.now - due <= STALE + 1e-9
            key = int(step.chunk.actions[0, 0])  # the chunk number, times 10
            assert step.step_index > last.get(key, -1)
            last[key] = step.step_index


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="step_period_s"):
        ActionChunkBroker(
            lambda o: ActionChunk(np.zeros((1, 1), np.float32), 0.0),
            step_period_s=0,
            staleness_s=0.1,
        )


def test_policy_client_chunks_come_from_the_supervised_reply(
    make_server: MakeServer, engine: PolicyEngine, arm: RobotSpec
) -> None:
    running = make_server(engine=engine)
    obs = np.random.default_rng(6).uniform(-0.3, 0.3, arm.obs_dim).astype(np.float32)
    with PolicyClient(running.address) as client:
        chunk = client.get_chunk(obs)
        assert chunk.horizon == 1
        np.testing.assert_allclose(
            chunk.actions[0], client.get_action(obs, deterministic=True).action
        )
        expected = client.get_action(obs, deterministic=True).action
        period = 0.05
        with ActionChunkBroker(client.get_chunk, step_period_s=period, staleness_s=0.04) as broker:
            steps = []
            for _ in range(6):
                steps.append(broker.act(obs))
                time.sleep(period)
    served = [s for s in steps if s.action is not None]
    # One-step chunks: each cycle fetches its own (one fetched ahead would be stale).
    assert len(served) >= 5, [s.reason for s in steps]
    for step in served:
        np.testing.assert_allclose(step.action, expected)
    assert chunk.version is not None
    assert chunk.version.id == engine.version.id
