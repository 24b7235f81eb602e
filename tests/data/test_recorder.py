"""Recorder: steps recorded on the control path reach every sink; nothing is dropped silently."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.data.data_builders import ACT_DIM, OBS_DIM, make_step
from tether.data import (
    DataError,
    ExperienceLog,
    ExperienceLogConfig,
    Recorder,
    RecorderConfig,
    ReplayBuffer,
    ReplayBufferConfig,
    StorageConfig,
    Transition,
    ingress_ns,
    read_log,
)


def small_buffer() -> ReplayBuffer:
    return ReplayBuffer(
        OBS_DIM,
        ACT_DIM,
        ReplayBufferConfig(storage=StorageConfig(ring_capacity=1000, reservoir_capacity=0)),
    )


class GatedSink:
    """A sink that holds the worker until the test opens the gate (a slow disk, say)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.received: list[Transition] = []

    def put(self, transitions: Sequence[Transition]) -> None:
        self.entered.set()
        self.gate.wait(10)
        self.received.extend(transitions)


class BrokenSink:
    def put(self, transitions: Sequence[Transition]) -> None:
        raise OSError("disk full")


def test_recorded_steps_reach_the_buffer_and_the_log(tmp_path: Path) -> None:
    buffer = small_buffer()
    log = ExperienceLog(
        tmp_path, OBS_DIM, ACT_DIM, ExperienceLogConfig(flush_interval_s=0.05, fsync=False)
    )
    with Recorder([buffer, log]) as recorder:
        for i in range(30):
            for session in ("a", "b"):
                assert recorder.record(make_step(i, session=session, last=i == 29))
        recorder.end_session("a")
        recorder.end_session("b")
        assert recorder.flush()
        stats = recorder.stats()
    log.close()
    assert len(buffer) == 58
    assert stats.pairing.transitions == 58
    assert stats.pairing.episodes_ended == 2
    assert stats.dropped_queue_full == stats.sink_errors == 0
    assert stats.worker_alive
    assert not recorder.stats().worker_alive  # closed by the with block
    table, _ = read_log(tmp_path)
    assert table is not None
    assert table.num_rows == 58
    assert sorted(set(table.column("session_id").to_pylist())) == ["a", "b"]


def test_a_full_queue_drops_counts_and_the_gap_is_never_paired() -> None:
    sink = GatedSink()
    recorder = Recorder([sink], RecorderConfig(max_pending_steps=5, max_batch_steps=2))
    try:
        recorder.record(make_step(0))
        recorder.record(make_step(1))
        assert sink.entered.wait(5)  # the worker is now stuck in the sink
        accepted = [recorder.record(make_step(i)) for i in range(2, 22)]
        assert accepted == [True] * 5 + [False] * 15
        assert recorder.stats().dropped_queue_full == 15
        sink.gate.set()
        recorder.end_session("s0")
        assert recorder.flush()
        stats = recorder.stats()
    finally:
        sink.gate.set()
        recorder.close()
    assert [t.step_index for t in sink.received] == [0, 1, 2, 3, 4, 5]
    assert stats.pairing.steps == 7
    assert stats.pairing.transitions == 6


def test_a_failing_sink_is_counted_and_does_not_starve_the_others() -> None:
    buffer = small_buffer()
    with Recorder([BrokenSink(), buffer]) as recorder:
        for i in range(10):
            recorder.record(make_step(i, ingress_ns=ingress_ns()))
        assert recorder.flush()
        stats = recorder.stats()
    assert len(buffer) == 9
    assert stats.sink_errors >= 1
    assert "disk full" in stats.last_sink_error


def test_recording_after_close_is_an_error() -> None:
    recorder = Recorder([])
    recorder.close()
    with pytest.raises(DataError, match="closed"):
        recorder.record(make_step(0))


def test_ingress_clock_is_monotonic() -> None:
    stamps = [ingress_ns() for _ in range(1000)]
    assert stamps == sorted(stamps)


@pytest.mark.parametrize(
    ("config", "within_s"),
    [
        # fewer steps than wake a worker: they wait for its next turn, no longer
        (RecorderConfig(wake_after_steps=10_000, wake_interval_s=0.05), 2.0),
        # as many as wake it: at once, although its turn is far away
        (RecorderConfig(wake_after_steps=2, wake_interval_s=1.0), 0.5),
    ],
    ids=["on-its-turn", "woken"],
)
def test_steps_reach_the_sinks_without_a_flush(config: RecorderConfig, within_s: float) -> None:
    """record() does not wake the worker for every step, yet nothing waits in the queue
    longer than the worker's turn, and a full enough queue wakes it at once."""

    buffer = small_buffer()
    with Recorder([buffer], config) as recorder:
        time.sleep(0.05)  # the worker is asleep in its wait now
        start = time.monotonic()
        recorder.record(make_step(0))
        recorder.record(make_step(1))
        while len(buffer) < 1 and time.monotonic() - start < within_s:
            time.sleep(0.005)
        assert len(buffer) == 1
