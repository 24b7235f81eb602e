"""Experience log: round trip with pandas, torn tails, reopen-and-append, retention, rebuild."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.data.data_builders import ACT_DIM, OBS_DIM, make_table, make_transitions, table_of
from tether.data import (
    ACTION_SOURCES,
    ExperienceLog,
    ExperienceLogConfig,
    LogFormatError,
    ReplayBuffer,
    ReplayBufferConfig,
    SamplerConfig,
    StorageConfig,
    Transition,
    TransitionTable,
    WriterConfig,
    read_log,
    rebuild_buffer,
)
from tether.data.log import FLUSH_SLICE_ROWS
from tether.data.log_reader import chunk_paths

FAST = ExperienceLogConfig(flush_interval_s=0.05, fsync=False)


def write(
    directory: Path, batches: list[list[Transition]], config: ExperienceLogConfig = FAST
) -> None:
    with ExperienceLog(directory, OBS_DIM, ACT_DIM, config) as log:
        for batch in batches:
            log.put(table_of(batch))
            log.flush()


def test_written_log_reads_back_with_pandas_field_for_field(tmp_path: Path) -> None:
    transitions = make_transitions(25, source="clipped", checks=1)
    write(tmp_path, [transitions[:10], transitions[10:]])
    (chunk,) = chunk_paths(tmp_path)
    frame = pd.read_feather(chunk)
    assert len(frame) == 25
    assert frame["step_index"].tolist() == list(range(25))
    assert frame["action_source"].unique().tolist() == ["clipped"]
    np.testing.assert_array_equal(
        np.stack(frame["observation"].to_numpy()), np.stack([t.observation for t in transitions])
    )
    assert frame["weights_sha256"][0] == "cd" * 32


def test_the_flusher_writes_without_an_explicit_flush(tmp_path: Path) -> None:
    log = ExperienceLog(
        tmp_path, OBS_DIM, ACT_DIM, ExperienceLogConfig(flush_interval_s=0.05, fsync=True)
    )
    try:
        log.put(make_table(7))
        deadline = time.monotonic() + 10  # generous: the machine is shared
        while log.stats().rows_flushed < 7 and time.monotonic() < deadline:
            time.sleep(0.01)
        _table, report = read_log(tmp_path)
        assert report.rows == 7
        assert report.torn[0].torn_bytes == 0  # open chunk: no footer yet, nothing torn
    finally:
        log.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_a_torn_tail_is_tolerated_reported_and_repaired(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    directory = tmp_path_factory.mktemp("torn")
    log = ExperienceLog(directory, OBS_DIM, ACT_DIM, FAST)
    sizes = [3, 5, 4]
    ends = []
    for i, n in enumerate(sizes):
        log.put(make_table(n, start=sum(sizes[:i])))
        log.flush()
        ends.append(chunk_paths(directory)[0].stat().st_size)
    log._stop.set()  # stop the flusher without sealing: the state a SIGKILL leaves behind
    log._flusher.join()
    (chunk,) = chunk_paths(directory)
    cut = data.draw(st.integers(0, ends[-1]))
    with chunk.open("r+b") as f:
        f.truncate(cut)
    complete = sum(n for n, end in zip(sizes, ends, strict=True) if end <= cut)
    table, report = read_log(directory)
    assert report.rows == complete
    assert (table.num_rows if table is not None else 0) == complete
    # reopening repairs the chunk into a sealed, pandas-readable file, then appends after it
    with ExperienceLog(directory, OBS_DIM, ACT_DIM, FAST) as again:
        again.put(make_table(2, start=100))
        again.flush()
    table, report = read_log(directory)
    assert all(c.sealed for c in report.chunks)
    assert table is not None
    assert table.column("step_index").to_pylist() == [*range(complete), 100, 101]
    for path in chunk_paths(directory):
        pd.read_feather(path)


def test_reopen_continues_in_a_new_chunk(tmp_path: Path) -> None:
    write(tmp_path, [make_transitions(4)])
    write(tmp_path, [make_transitions(3, start=4)])
    assert [p.name for p in chunk_paths(tmp_path)] == [
        "chunk-00000001.arrow",
        "chunk-00000002.arrow",
    ]
    table, report = read_log(tmp_path)
    assert table is not None
    assert table.column("step_index").to_pylist() == list(range(7))
    assert report.torn == ()


def test_reopening_with_other_dimensions_is_refused(tmp_path: Path) -> None:
    write(tmp_path, [make_transitions(2)])
    with pytest.raises(LogFormatError, match="obs_dim=5"):
        ExperienceLog(tmp_path, OBS_DIM + 1, ACT_DIM, FAST)


def test_retention_removes_the_oldest_chunks_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = ExperienceLogConfig(
        flush_interval_s=1, fsync=False, chunk_max_bytes=4096, retention_max_bytes=12_000
    )
    with caplog.at_level(logging.WARNING, logger="tether.data.log"):
        write(tmp_path, [make_transitions(20, start=20 * i) for i in range(12)], config)
    total = sum(p.stat().st_size for p in chunk_paths(tmp_path))
    assert total <= 12_000
    assert "removed oldest chunk chunk-00000001.arrow" in caplog.text
    table, _ = read_log(tmp_path)
    assert table is not None
    steps = table.column("step_index").to_pylist()
    assert steps == list(range(steps[0], 240))  # a contiguous newest suffix survives
    assert steps[0] > 0


def test_retention_never_removes_the_newest_chunk(tmp_path: Path) -> None:
    config = ExperienceLogConfig(fsync=False, chunk_max_bytes=4096, retention_max_bytes=4096)
    write(tmp_path, [make_transitions(40, start=40 * i) for i in range(3)], config)
    table, _ = read_log(tmp_path)
    assert table is not None
    assert table.column("step_index").to_pylist()[-1] == 119


def test_a_directory_of_foreign_arrow_files_is_refused(tmp_path: Path) -> None:
    chunk = tmp_path / "chunk-00000001.arrow"
    table = pa.table({"x": [1, 2]})
    with pa.OSFile(str(chunk), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    with pytest.raises(LogFormatError, match="format"):
        read_log(tmp_path)


def config_for_rebuild() -> ReplayBufferConfig:
    return ReplayBufferConfig(
        storage=StorageConfig(ring_capacity=150, reservoir_capacity=60),
        writer=WriterConfig(admit_probability=0.5, seed=11),
        sampler=SamplerConfig(seed=12),
    )


def test_log_written_reopened_and_rebuilt_gives_the_same_buffer(tmp_path: Path) -> None:
    live = ReplayBuffer(OBS_DIM, ACT_DIM, config_for_rebuild())
    transitions = make_transitions(400, source="backup", checks=8, version=3)
    batches = [transitions[i : i + 37] for i in range(0, 400, 37)]
    for batch in batches:
        live.extend(batch)
    write(tmp_path, batches[:5])
    write(tmp_path, batches[5:])  # a restart in between
    rebuilt = ReplayBuffer(OBS_DIM, ACT_DIM, config_for_rebuild())
    report = rebuild_buffer(tmp_path, rebuilt)
    assert report.rows == 400
    live_state, rebuilt_state = live.state_dict(), rebuilt.state_dict()
    assert live_state.keys() == rebuilt_state.keys()
    for key in live_state:
        np.testing.assert_array_equal(live_state[key], rebuilt_state[key], err_msg=key)


def test_a_malformed_transition_is_rejected_and_counted_without_blocking_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rows of other dimensions than the log's are rejected at put, counted and logged;
    the rows before and after them are written."""
    good = make_transitions(3)
    wide = np.zeros(OBS_DIM + 2, np.float32)
    bad = good[1]._replace(observation=wide, next_observation=wide)
    with ExperienceLog(tmp_path, OBS_DIM, ACT_DIM, FAST) as log:
        log.put(table_of([good[0]]))
        log.put(TransitionTable.from_transitions([bad], OBS_DIM + 2, ACT_DIM))
        log.put(table_of([good[2]]))
        assert log.stats().rows_rejected == 1
        assert log.stats().pending_rows == 2
        log.flush()
        log.put(make_table(2, start=10))
        log.flush()
        stats = log.stats()
    assert stats.rows_rejected == 1
    assert stats.rows_flushed == 4
    assert stats.flush_errors == 0
    assert "rejected 1 transitions ((obs_dim, act_dim) (7, 3)" in caplog.text
    table, _ = read_log(tmp_path)
    assert table is not None
    assert table.column("step_index").to_pylist() == [0, 2, 10, 11]


@pytest.mark.parametrize(
    "field",
    ["client_timestamp_ns", "step_index", "ingress_ns", "next_ingress_ns", "policy_version"],
)
def test_a_stamp_beyond_int64_cannot_reach_the_log(field: str) -> None:
    """A stranger's step stamped 2**63 once raised OverflowError in a flush and lost the
    whole batch; now the table a sink takes cannot hold it: building it refuses the row."""
    good = make_transitions(3)
    bad = good[1]._replace(**{field: 2**63})
    with pytest.raises(OverflowError):
        table_of([good[0], bad, good[2]])


def test_an_unstorable_row_is_refused_alone_and_the_batch_is_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A row whose value the log cannot store (here a source code beyond the known ones)
    is rejected by itself at flush; the other rows of its batch are written, and the
    flush does not fail or retry."""
    rows = make_table(3)
    rows.arrays.action_sources[1] = len(ACTION_SOURCES)
    with ExperienceLog(tmp_path, OBS_DIM, ACT_DIM, FAST) as log:
        log.put(rows)
        log.flush()
        stats = log.stats()
        log.put(make_table(1, start=5))
        log.flush()
    assert stats.rows_rejected == 1
    assert stats.rows_flushed == 2
    assert stats.flush_errors == 0
    assert stats.pending_rows == 0
    assert "beyond its column's type or source" in caplog.text
    table, _ = read_log(tmp_path)
    assert table is not None
    assert table.column("step_index").to_pylist() == [0, 2, 5]
    assert table.column("action_source").to_pylist() == ["policy"] * 3


def test_a_failed_write_keeps_the_rows_and_continues_in_a_fresh_chunk(tmp_path: Path) -> None:
    # A long interval: only this test's flushes run, so the failure lands where it expects.
    config = ExperienceLogConfig(flush_interval_s=60, fsync=False)
    log = ExperienceLog(tmp_path, OBS_DIM, ACT_DIM, config)
    try:
        log.put(make_table(3))
        log.flush()
        assert log._chunk is not None
        log._chunk.file.close()  # the disk goes away under the open chunk
        log.put(make_table(2, start=3))
        with pytest.raises(ValueError, match="closed file"):
            log.flush()
        assert log.stats().pending_rows == 2
        assert log.stats().flush_errors == 1
        assert log.flush() == 5  # retried into a new chunk
    finally:
        log.close()
    table, report = read_log(tmp_path)
    assert table is not None
    assert table.column("step_index").to_pylist() == [0, 1, 2, 3, 4]
    assert len(report.chunks) == 2


def test_a_large_flush_is_written_in_slices_and_a_failed_slice_keeps_the_rest(
    tmp_path: Path,
) -> None:
    """A flush appends FLUSH_SLICE_ROWS rows at a time; when a slice fails, its rows and
    every later one are kept, in order, and the next flush writes them once each."""
    config = ExperienceLogConfig(flush_interval_s=60, fsync=False)
    log = ExperienceLog(tmp_path, OBS_DIM, ACT_DIM, config)
    total = 2 * FLUSH_SLICE_ROWS + 7
    write = log._write
    calls = 0

    def second_slice_fails(batch: pa.RecordBatch) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError("disk full")
        write(batch)

    try:
        log.put(make_table(total))
        log._write = second_slice_fails  # type: ignore[method-assign]
        with pytest.raises(OSError, match="disk full"):
            log.flush()
        assert log.stats().rows_flushed == FLUSH_SLICE_ROWS
        assert log.stats().pending_rows == total - FLUSH_SLICE_ROWS
        assert log.flush() == total
        assert log.stats().flushes == 1 + 2  # the first slice, then the two left
    finally:
        log.close()
    table, _ = read_log(tmp_path)
    assert table is not None
    assert table.column("step_index").to_pylist() == list(range(total))


def test_first_flush_imports_nothing_after_open(tmp_path: Path) -> None:
    """pyarrow imports pandas on its first conversion; the log pays that at open, not on
    the flusher thread while serving (where it stalled every step for ~0.25 s)."""
    import subprocess
    import sys

    script = f"""
import sys
from tests.data.data_builders import ACT_DIM, OBS_DIM, make_table
from tether.data import ExperienceLog, ExperienceLogConfig
log = ExperienceLog({str(tmp_path)!r}, OBS_DIM, ACT_DIM, ExperienceLogConfig(fsync=False))
before = set(sys.modules)
log.put(make_table(3))
log.flush()
log.close()
print(sorted(set(sys.modules) - before))
"""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout[:400]
