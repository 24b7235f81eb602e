"""The benchmarks still run: each one with the smallest arguments, in a subprocess.

Their figures are not judged here (docs/benchmarks.md records them, measured on a quiet
machine); this catches a benchmark broken by a change to what it calls.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.child_runs import ChildRuns

ROOT = Path(__file__).resolve().parents[1]

SMALL_RUNS = {
    "bench_versions.py": (["--rounds", "50"], "route(), canary share"),
    "bench_rollback_check.py": (["--seeds", "2", "--episodes", "40"], "| windows alone |"),
    "bench_sim.py": (["--steps", "200", "--repeats", "1"], "gravity_torque"),
    "bench_contacts.py": (
        ["--seeds", "1", "--steps", "130", "--arms", "drifted", "--hand", "0.4", "--jobs", "1"],
        "| this tree | drifted | 0 / 1 |",
    ),
    "bench_engine.py": (["--rounds", "20", "--loops", "5", "--repeats", "1"], "'auto' picks"),
    "bench_supervisor.py": (
        ["--calls", "20", "--repeats", "1", "--episodes", "1"],
        "NaN -> backup",
    ),
    "bench_task.py": (["--tasks", "2"], "scripted controller"),
    "bench_model_kinematics.py": (["--steps", "30"], "| robot model, no reach bound |"),
    "bench_handler.py": (
        [
            *("--robots", "2", "--seconds", "0.2", "--rounds", "1"),
            *("--variants", "served,cached+unrecorded"),
        ],
        "| cached+unrecorded |",
    ),
    "bench_chunks.py": (["--rounds", "3", "--side", "16", "--horizon", "2"], "supervise_chunk"),
    "bench_compile.py": (["--kernels", "replies"], "| replies |"),
    "bench_peers.py": (
        [
            *("--seconds", "0.2", "--clients", "2", "--rounds", "1"),
            *("--servers", "echo;tether", "--gc-stats"),
        ],
        "| ms collecting | longest ms |",
    ),
}


@pytest.fixture(scope="module")
def small_runs() -> Iterator[ChildRuns]:
    """Every benchmark's small run, started at once: each spends most of its time importing."""
    runs = ChildRuns()
    try:
        for script, (args, _) in SMALL_RUNS.items():
            runs.start(script, [sys.executable, str(ROOT / "benchmarks" / script), *args], cwd=ROOT)
        yield runs
    finally:
        runs.close()


@pytest.mark.parametrize("script", sorted(SMALL_RUNS))
def test_benchmark_runs_with_small_arguments(small_runs: ChildRuns, script: str) -> None:
    _, expected = SMALL_RUNS[script]
    stdout = small_runs.output(script)
    assert expected in stdout, stdout[-2000:]
