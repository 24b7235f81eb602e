"""Recorder: steps recorded on the control path reach every sink; nothing is dropped silently."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.data.data_builders import ACT_DIM, OBS_DIM, CollectingSink, make_step
from tether.data import (
    AnsweredSteps,
    DataError,
    ExperienceLog,
    ExperienceLogConfig,
    Recorder,
    RecorderConfig,
    RecorderStats,
    ReplayBuffer,
    ReplayBufferConfig,
    StorageConfig,
    Transition,
    TransitionTable,
    ingress_ns,
    read_log,
)
from tether.data.pairing import Pairs
from tether.data.recorder import _BlockStore


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

    def put(self, transitions: TransitionTable) -> None:
        self.entered.set()
        self.gate.wait(10)
        self.received.extend(transitions.transitions())


def _release(recorder: Recorder, sink: GatedSink) -> RecorderStats:
    """Let the stuck worker go on, end the session, and the stats once all reached ``sink``."""
    sink.gate.set()
    recorder.end_session("s0")
    assert recorder.flush()
    return recorder.stats()


class BrokenSink:
    def put(self, transitions: TransitionTable) -> None:
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
        stats = _release(recorder, sink)
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


def test_a_full_queue_counts_the_steps_of_a_dropped_block() -> None:
    """record_steps takes a block whole or not at all; what it drops is counted in steps,
    and the steps it dropped leave a gap the pairer never bridges."""
    sink = GatedSink()
    recorder = Recorder([sink], RecorderConfig(max_pending_steps=5, max_batch_steps=2))
    try:
        assert recorder.record_steps(AnsweredSteps.from_records([make_step(0), make_step(1)]))
        assert sink.entered.wait(5)  # the worker is now stuck in the sink
        assert recorder.record_steps(AnsweredSteps.from_records([make_step(i) for i in (2, 3, 4)]))
        assert not recorder.record_steps(
            AnsweredSteps.from_records([make_step(i) for i in (5, 6, 7)])
        )
        assert recorder.record_steps(AnsweredSteps.from_records([make_step(i) for i in (8, 9)]))
        assert recorder.stats().dropped_queue_full == 3
        stats = _release(recorder, sink)
    finally:
        sink.gate.set()
        recorder.close()
    assert [t.step_index for t in sink.received] == [0, 1, 2, 3, 8]
    assert stats.pairing.steps == 7
    assert stats.pairing.missing == 3
    assert stats.dropped_queue_full == 3


def test_a_recorded_human_override_reaches_the_sinks_as_the_persons_action() -> None:
    """A step carrying executed_previous_action is recorded, not refused, and the
    transition it completes holds the person's action, with source "human"."""
    sink = CollectingSink()
    with Recorder([sink]) as recorder:
        assert recorder.record(make_step(0, source="clipped"))
        assert recorder.record(make_step(1, override=True))
        assert recorder.record(make_step(2))
        assert recorder.flush()
        stats = recorder.stats()
    assert stats.pairing.malformed == 0
    first, second = sink.received
    assert first.action_source == "human"
    np.testing.assert_array_equal(first.action, np.full(ACT_DIM, -0.5, dtype=np.float32))
    np.testing.assert_array_equal(first.proposed_action, make_step(0).proposed_action)
    assert second.action_source == "policy"
    np.testing.assert_array_equal(second.action, make_step(1).safe_action)


def test_steps_reach_every_sink_as_one_table_per_wake() -> None:
    """Sinks take a TransitionTable: its rows read back as the transitions paired."""
    sink = CollectingSink()
    with Recorder([sink], RecorderConfig(wake_after_steps=10_000, wake_interval_s=1.0)) as rec:
        assert rec.record_steps(
            AnsweredSteps.from_records(
                [make_step(i, session=s) for i in range(4) for s in ("a", "b")]
            )
        )
        assert rec.flush()
    assert sink.puts == 1
    assert sorted((t.session_id, t.step_index) for t in sink.received) == [
        (s, i) for s in ("a", "b") for i in range(3)
    ]


def _hand_over(recorder: Recorder, indices: range) -> None:
    recorder.record_steps(AnsweredSteps.from_records([make_step(i) for i in indices]))


def test_handing_steps_over_never_wakes_the_worker_a_nudge_does() -> None:
    """The batch hands its steps over before its replies are sent: the worker must not
    wake then (it would take the GIL from the replies), only when the loop nudges it
    after the send. With the hand-over waking it, the sink fills before the nudge."""
    buffer = small_buffer()
    config = RecorderConfig(wake_after_steps=4, wake_interval_s=1.0)
    with Recorder([buffer], config) as recorder:
        time.sleep(0.05)  # the worker is asleep in its wait now (2 s)
        _hand_over(recorder, range(8))
        time.sleep(0.3)
        assert len(buffer) == 0  # 8 steps queued, twice wake_after_steps: nobody woke it
        start = time.monotonic()
        recorder.nudge()
        while len(buffer) < 7 and time.monotonic() - start < 1.0:
            time.sleep(0.005)
        assert len(buffer) == 7
        assert time.monotonic() - start < 1.0  # the nudge, not the worker's own timer


def test_a_nudge_wakes_the_worker_for_old_steps_and_not_for_young_ones() -> None:
    buffer = small_buffer()
    config = RecorderConfig(wake_after_steps=1_000, wake_interval_s=0.4)
    with Recorder([buffer], config) as recorder:
        time.sleep(0.05)
        _hand_over(recorder, range(3))
        recorder.nudge()  # the oldest step is young: too early
        time.sleep(0.2)
        assert len(buffer) == 0
        time.sleep(0.25)  # now it waited longer than wake_interval_s (its timer: 0.8 s)
        start = time.monotonic()
        recorder.nudge()
        while len(buffer) < 2 and time.monotonic() - start < 1.0:
            time.sleep(0.005)
        assert len(buffer) == 2
        assert time.monotonic() - start < 0.3


def test_a_malformed_first_step_does_not_decide_the_recorders_dimensions() -> None:
    """Dimensions come from the first well-formed steps: a wrong first step is refused
    alone, and the steps after it are paired."""
    sink = CollectingSink()
    wide = make_step(0, session="bad")._replace(observation=np.zeros((2, OBS_DIM), np.float32))
    with Recorder([sink]) as recorder:
        recorder.record(wide)
        for i in range(4):
            recorder.record(make_step(i))
        assert recorder.flush()
        stats = recorder.stats()
    assert [t.step_index for t in sink.received] == [0, 1, 2]
    assert stats.pairing.malformed == 1


def test_a_fault_of_the_worker_loses_its_wake_and_recording_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A defect in pairing or gathering (not a sink's) must not end the worker: hours of
    serving would then record nothing. It loses that wake's steps, counted, and the flush
    behind it says so; the steps after it are paired as always."""
    sink = CollectingSink()
    gather = _BlockStore.gather
    calls = [0]

    def faulty(store: _BlockStore, pairs: Pairs) -> TransitionTable:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("a defect in gathering")
        return gather(store, pairs)

    monkeypatch.setattr(_BlockStore, "gather", faulty)
    config = RecorderConfig(wake_after_steps=10_000, wake_interval_s=1.0)
    with Recorder([sink], config) as recorder:
        _hand_over(recorder, range(5))
        assert not recorder.flush()  # the steps before it were lost, and it says so
        faulted = recorder.stats()
        _hand_over(recorder, range(5, 10))
        assert recorder.flush()
        stats = recorder.stats()
    assert faulted.worker_faults == 1
    assert faulted.lost_to_faults == 5
    assert "a defect in gathering" in faulted.last_worker_fault
    assert faulted.worker_alive
    assert stats.worker_faults == 1
    # Step 4 was held by the pairer when its wake failed: it pairs with step 5.
    assert [t.step_index for t in sink.received] == [4, 5, 6, 7, 8]
