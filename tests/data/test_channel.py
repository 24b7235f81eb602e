"""Transition channel: process-to-process delivery in order, and drop counting under backpressure."""

from __future__ import annotations

import multiprocessing
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.data.data_builders import (
    ACT_DIM,
    OBS_DIM,
    die_holding_the_channel_lock,
    make_arrays,
    make_table,
    produce_into_channel,
)
from tether.data import ChannelConfig, ChannelError, TransitionChannel


def test_rows_cross_processes_complete_and_in_order() -> None:
    count = 20_000
    channel = TransitionChannel(OBS_DIM, ACT_DIM, ChannelConfig(capacity=4096))
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(target=produce_into_channel, args=(channel, count, 256))
    child.start()
    try:
        received: list[np.ndarray] = []
        total = 0
        while total < count:
            rows = channel.get(max_rows=1000, timeout_s=30)
            assert len(rows), "producer stopped delivering"
            np.testing.assert_array_equal(rows.observations[:, 0], rows.rewards)
            received.append(rows.rewards)
            total += len(rows)
        child.join(30)
        assert child.exitcode == 0
        assert np.concatenate(received).tolist() == list(range(count))
        stats = channel.stats()
        assert stats.offered == stats.accepted + stats.dropped
        assert stats.consumed == count
    finally:
        if child.is_alive():
            child.kill()
        channel.close()


def test_a_full_ring_drops_and_counts_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    with TransitionChannel(OBS_DIM, ACT_DIM, ChannelConfig(capacity=10)) as channel:
        assert channel.put(make_table(25)) == 10
        stats = channel.stats()
        assert (stats.offered, stats.accepted, stats.dropped, stats.backlog) == (25, 10, 15, 10)
        assert "15 transitions dropped" in caplog.text
        rows = channel.get(100)
        assert rows.rewards.tolist() == list(range(10))  # the oldest are kept, the overflow dropped
        assert len(channel.get(100, timeout_s=0.01)) == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 16), st.lists(st.tuples(st.booleans(), st.integers(0, 20)), max_size=30))
def test_channel_matches_a_bounded_queue_model(capacity: int, ops: list[tuple[bool, int]]) -> None:
    model: deque[float] = deque()
    dropped = 0
    next_row = 0
    with TransitionChannel(OBS_DIM, ACT_DIM, ChannelConfig(capacity=capacity)) as channel:
        for is_put, n in ops:
            if is_put:
                fit = min(n, capacity - len(model))
                assert channel.put_arrays(make_arrays(n, start=next_row)) == fit
                model.extend(range(next_row, next_row + fit))
                dropped += n - fit
                next_row += n
            else:
                got = channel.get(max(n, 1)).rewards.tolist()
                assert got == [model.popleft() for _ in range(len(got))]
                assert len(got) == min(max(n, 1), len(got) + len(model))
        stats = channel.stats()
        assert stats.dropped == dropped
        assert stats.backlog == len(model)


def attached(channel: TransitionChannel) -> TransitionChannel:
    """The channel as a child process receives it (what unpickling does there)."""
    other = TransitionChannel.__new__(TransitionChannel)
    other.__setstate__(channel.__getstate__())
    return other


def test_a_restarted_consumer_finds_the_rows_its_predecessor_left() -> None:
    producer = TransitionChannel(OBS_DIM, ACT_DIM, ChannelConfig(capacity=8))
    attached(producer).close()  # a learner that attached and exited
    assert producer.put_arrays(make_arrays(10)) == 8
    assert producer.stats().dropped == 2
    successor = attached(producer)
    assert successor.get(100).rewards.tolist() == list(range(8))
    successor.close()
    producer.close()
    with pytest.raises(ChannelError, match="closed"):
        producer.put_arrays(make_arrays(1))


def test_after_the_creator_closes_a_remote_producer_counts_its_rows_as_dropped() -> None:
    owner = TransitionChannel(OBS_DIM, ACT_DIM, ChannelConfig(capacity=8))
    remote = attached(owner)
    owner.close()
    assert remote.put_arrays(make_arrays(3)) == 0
    assert remote.stats().dropped == 3
    remote.close()


def test_a_consumer_that_died_holding_the_lock_cannot_block_the_producer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    channel = TransitionChannel(OBS_DIM, ACT_DIM, ChannelConfig(capacity=8))
    child = multiprocessing.get_context("spawn").Process(
        target=die_holding_the_channel_lock, args=(channel,)
    )
    child.start()
    child.join(30)
    try:
        assert channel.put_arrays(make_arrays(5)) == 0  # returns after the lock timeout
        stats = channel.stats()
        assert stats.dropped_locally == 5
        assert "lock is stuck" in caplog.text
    finally:
        channel.close()
