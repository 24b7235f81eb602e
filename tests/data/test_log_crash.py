"""Kill the writer with SIGKILL mid-stream: every flushed row survives and the log carries on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from tests.data.data_builders import ACT_DIM, OBS_DIM, make_table
from tether.data import ExperienceLog, ExperienceLogConfig, read_log
from tether.data.log_reader import chunk_paths

# The writer: flushes on its own every 20 ms and also reports explicit flushes, forever.
WRITER = """
import sys
sys.path.insert(0, sys.argv[2])
from tests.data.data_builders import make_table
from tether.data import ExperienceLog, ExperienceLogConfig
config = ExperienceLogConfig(flush_interval_s=0.02, fsync=False, chunk_max_bytes=200_000)
log = ExperienceLog(sys.argv[1], 5, 3, config)
start = 0
while True:
    log.put(make_table(100, start=start))
    start += 100
    if start % 1000 == 0:
        print(log.flush(), flush=True)
"""


def test_sigkill_of_the_writer_loses_no_flushed_row(tmp_path: Path) -> None:
    here = str(Path(__file__).parent)
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path), here],
        stdout=subprocess.PIPE,
        text=True,
    )
    acknowledged = 0
    deadline = time.monotonic() + 60
    try:
        assert proc.stdout is not None
        while acknowledged < 5_000 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "writer died before it was killed"
            acknowledged = int(line)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    assert acknowledged >= 5_000

    table, report = read_log(tmp_path)
    assert table is not None
    rows = table.num_rows
    assert rows >= acknowledged  # every acknowledged row, maybe more that the flusher wrote
    steps = np.asarray(table.column("step_index").to_pylist())
    np.testing.assert_array_equal(steps, np.arange(rows))
    assert report.chunks[-1].torn_bytes >= 0
    assert all(c.sealed for c in report.chunks[:-1])

    with ExperienceLog(tmp_path, OBS_DIM, ACT_DIM, ExperienceLogConfig(fsync=False)) as log:
        log.put(make_table(50, start=rows))
    table, report = read_log(tmp_path)
    assert table is not None
    assert table.column("step_index").to_pylist() == list(range(rows + 50))
    assert all(c.sealed and c.torn_bytes == 0 for c in report.chunks)
    frames = [pd.read_feather(p) for p in chunk_paths(tmp_path)]
    assert sum(len(f) for f in frames) == rows + 50
