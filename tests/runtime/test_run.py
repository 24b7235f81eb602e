"""``tether run`` end to end: the README's quick-start command, on a small scale.

Runs exactly the command the README gives (its `tether run` line, install included),
shortened and unthrottled through the TETHER_RUN_* environment variables, and checks
the run directory and the system's invariants: nothing reaches the simulated arm past
its limits, every executed step is logged with its version, source and monotonic
stamps, nothing on the data path is dropped, and promotions only come from the gate.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tether.runtime.records import EVENTS_FILE, RunEvent, read_jsonl
from tether.runtime.report import summarize_run

ROOT = Path(__file__).resolve().parents[2]


def quickstart_commands() -> list[str]:
    """The command lines of the README's quick-start block, comments dropped."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None, "README's quick start has no bash block"
    return [
        line.strip()
        for line in block.group(1).splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def test_readme_quick_start_is_two_commands_and_ci_runs_the_second() -> None:
    commands = quickstart_commands()
    assert len(commands) == 2
    assert commands[0].endswith("tether run")
    assert commands[1] in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    env = dict(os.environ)
    env.update(
        TETHER_RUN_FAST="1",
        TETHER_RUN_DURATION="25",
        TETHER_RUN_OUT=str(out),
        TETHER_RUN_DASHBOARD="plain",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    command = quickstart_commands()[0]
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    runs = sorted(p for p in out.iterdir() if p.is_dir())
    assert len(runs) == 1, runs
    return runs[0]


def test_no_degradation_in_the_first_20_s_of_control_time(run_dir: Path) -> None:
    """Start-up work (imports, first inference, the learner's start) is not a robot's fault,
    and every window runs on control time: the quick start stays NORMAL while it warms up."""
    events = list(read_jsonl(run_dir / EVENTS_FILE, RunEvent))
    early = [
        e
        for e in events
        if e.kind == "degradation" and e.control_s is not None and e.control_s < 20.0
    ]
    assert early == [], [(e.control_s, e.message) for e in early]
    assert all(e.control_s is not None for e in events)
    stop = next(e for e in events if e.kind == "stop")
    assert stop.control_s is not None
    # --fast, 25 s of wall time: the robots' control time runs several times faster
    assert stop.control_s >= 30.0


def test_run_directory_holds_everything_the_report_needs(run_dir: Path) -> None:
    for name in (
        "config.yaml",
        "events.jsonl",
        "episodes.jsonl",
        "snapshots.jsonl",
        "summary.json",
    ):
        assert (run_dir / name).stat().st_size > 0, name
    assert np.load(run_dir / "latency_ms.npy").size > 100
    assert (run_dir / "final_bundle" / "manifest.json").exists()
    assert any((run_dir / "experience").glob("*.arrow"))
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    pngs = sorted((run_dir / "plots").glob("*.png"))
    assert pngs
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"plots/{png.name}" in html


def test_nothing_past_the_limits_reached_the_arm(run_dir: Path) -> None:
    summary = summarize_run(run_dir)
    assert summary.violations == 0
    assert summary.contacts == 0
    assert {r.role for r in summary.roles} == {"learning", "baseline"}
    for role in summary.roles:
        assert role.episodes > 0


def test_every_logged_step_names_its_version_source_and_monotonic_stamps(run_dir: Path) -> None:
    frames = [pd.read_feather(p) for p in sorted((run_dir / "experience").glob("*.arrow"))]
    log = pd.concat(frames, ignore_index=True)
    assert len(log) > 500
    assert (log["policy_version"] >= 1).all()
    assert log["weights_sha256"].str.len().eq(64).all()
    assert set(log["action_source"]) <= {"policy", "clipped", "backup", "human"}
    assert (log["next_ingress_ns"] > log["ingress_ns"]).all()
    for _, session in log.groupby("session_id"):
        assert session["ingress_ns"].is_monotonic_increasing


def test_data_path_dropped_nothing_and_promotions_came_through_the_gate(run_dir: Path) -> None:
    events = list(read_jsonl(run_dir / EVENTS_FILE, RunEvent))
    stop = [e for e in events if e.kind == "stop"]
    assert len(stop) == 1
    details = stop[0].details
    # A step the server refused (e.g. stale under load: DEADLINE_EXCEEDED) was never
    # acknowledged and is never paired across; on a busy 2-core machine a few happen.
    assert details["recorder"]["missing"] <= 0.01 * details["recorder"]["steps"]
    assert details["recorder"]["dropped_queue_full"] == 0
    assert details["recorder"]["sink_errors"] == 0
    assert details["recorder"]["worker_faults"] == 0
    assert details["channel"]["dropped"] == 0
    assert details["experience_log"]["rows_flushed"] == details["recorder"]["transitions"]
    candidates = {e.version for e in events if e.kind == "candidate"}
    promotions = [e for e in events if e.kind == "promotion"]
    assert promotions, "no version was promoted: the gate was never crossed"
    for promotion in promotions:
        assert promotion.version in candidates
        # the server-side gate ends with the canary: a promotion without it skipped the gate
        assert "canary" in promotion.details["stages_passed"], promotion
    json.dumps([e.details for e in events])  # every event is plain JSON


def _tether_run(out: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "TETHER_RUN_DASHBOARD": "plain"}
    return subprocess.Popen(
        [sys.executable, "-c", "from tether.cli.app import main; main()", "run", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_run_on_a_missing_bundle_refuses_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    proc = _tether_run(out, "--bundle", str(tmp_path / "nope"), "--out", str(out))
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stdout + stderr
    assert "nope" in stderr
    assert not out.exists() or list(out.iterdir()) == []


def test_ctrl_c_is_an_interruption_not_a_learner_crash(tmp_path: Path) -> None:
    """SIGINT reached the learner too, which then looked like a crash and was restarted."""
    out = tmp_path / "runs"
    proc = _tether_run(out, "--fast", "--duration", "120", "--out", str(out))
    try:
        deadline = time.monotonic() + 180
        events: list[RunEvent] = []
        while time.monotonic() < deadline:
            runs = [p for p in out.glob("*") if (p / EVENTS_FILE).exists()]
            events = list(read_jsonl(runs[0] / EVENTS_FILE, RunEvent)) if runs else []
            if any(e.kind == "start" for e in events) or proc.poll() is not None:
                break
            time.sleep(0.5)
        assert any(e.kind == "start" for e in events), proc.communicate(timeout=30)
        time.sleep(1.0)  # the learner and the robots run (start waits for both)
        # A terminal's Ctrl-C goes to the whole process group: the learner and robots too.
        for pid in [proc.pid, *_children(proc.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stdout[-2000:] + stderr[-2000:]
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    events = list(read_jsonl(run / EVENTS_FILE, RunEvent))
    kinds = [e.kind for e in events]
    assert "interrupted" in kinds
    assert "learner_crash" not in kinds, [e.message for e in events if e.kind == "learner_crash"]
    assert "learner_restart" not in kinds
    assert next(e for e in events if e.kind == "stop").details["interrupted_by"] == "SIGINT"
    assert summarize_run(run).interrupted_by == "SIGINT"
    assert "interrupted by SIGINT" in (run / "report.html").read_text(encoding="utf-8")
    assert "interrupted" in stdout


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (the learner, the robots), from /proc."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        path = Path(f"/proc/{parent}/task/{parent}/children")
        kids = [int(k) for k in path.read_text().split()] if path.exists() else []
        found += kids
        frontier += kids
    return found
