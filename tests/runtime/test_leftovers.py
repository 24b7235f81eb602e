"""A new run stops what an earlier one left running, and nothing else."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil

from tether.runtime.leftovers import (
    PROCESS_FILE,
    forget_processes,
    record_processes,
    stop_leftovers,
)


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_children_of_a_dead_run_are_stopped_and_a_live_runs_are_not(tmp_path: Path) -> None:
    dead_run, live_run = tmp_path / "run-a", tmp_path / "run-b"
    dead_run.mkdir()
    live_run.mkdir()
    orphan, kept = _sleeper(), _sleeper()
    try:
        # A run whose main process is gone: its file names a main that no longer runs.
        record_processes(dead_run, [orphan.pid])
        text = (
            (dead_run / PROCESS_FILE)
            .read_text()
            .replace(f'"pid": {psutil.Process().pid}', '"pid": 999999999')
        )
        (dead_run / PROCESS_FILE).write_text(text)
        record_processes(live_run, [kept.pid])  # this test process is that run's main
        assert stop_leftovers(tmp_path) == [orphan.pid]
        assert orphan.wait(10) is not None
        assert kept.poll() is None
        assert not (dead_run / PROCESS_FILE).exists()
        assert (live_run / PROCESS_FILE).exists()
        forget_processes(live_run)
        assert not (live_run / PROCESS_FILE).exists()
    finally:
        for p in (orphan, kept):
            p.kill()
            p.wait(10)


def test_a_reused_pid_is_never_signalled(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    other = _sleeper()
    try:
        record_processes(run, [other.pid])
        text = (run / PROCESS_FILE).read_text()
        data = text.replace(f'"pid": {psutil.Process().pid}', '"pid": 999999999')
        # The same pid, started at another time: not the process the run started.
        started = psutil.Process(other.pid).create_time()
        (run / PROCESS_FILE).write_text(data.replace(repr(started), repr(started - 100.0)))
        assert stop_leftovers(tmp_path) == []
        assert other.poll() is None
    finally:
        other.kill()
        other.wait(10)
