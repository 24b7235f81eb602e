"""The benchmarks still run: each one with the smallest arguments, in a subprocess.

Their figures are not judged here (docs/benchmarks.md records them, measured on a quiet
machine); this catches a benchmark broken by a change to what it calls.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SMALL_RUNS = {
    "bench_versions.py": (["--rounds", "50"], "route(), canary share"),
    "bench_sim.py": (["--steps", "200", "--repeats", "1"], "gravity_torque"),
    "bench_engine.py": (["--rounds", "20", "--loops", "5", "--repeats", "1"], "'auto' picks"),
    "bench_supervisor.py": (
        ["--calls", "20", "--repeats", "1", "--episodes", "1"],
        "NaN -> backup",
    ),
    "bench_task.py": (["--tasks", "2"], "scripted controller"),
    "bench_handler.py": (
        ["--robots", "2", "--seconds", "0.2", "--rounds", "1"],
        "everything else",
    ),
    "bench_chunks.py": (["--rounds", "3", "--side", "16", "--horizon", "2"], "supervise_chunk"),
    "bench_peers.py": (
        [
            *("--seconds", "0.2", "--clients", "2", "--rounds", "1"),
            *("--servers", "echo;tether", "--gc-stats"),
        ],
        "| ms collecting | longest ms |",
    ),
}


@pytest.mark.parametrize("script", sorted(SMALL_RUNS))
def test_benchmark_runs_with_small_arguments(script: str) -> None:
    args, expected = SMALL_RUNS[script]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert expected in done.stdout, done.stdout[-2000:]
