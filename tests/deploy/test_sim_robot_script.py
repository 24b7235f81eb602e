"""The compose fleet's simulated arm (``deploy/sim_robot.py``) against a real server."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.deploy.fleet import fleet
from tests.deploy.repo_files import DEPLOY, load_script
from tether.spec import RobotSpec

sim_robot = load_script(DEPLOY / "sim_robot.py")


def test_the_script_runs_its_steps_and_prints_its_statistics(
    bundle_path: Path, arm: RobotSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with fleet(bundle_path, arm, addresses=("127.0.0.1",)) as (port, _):
            argv = ["--target", f"127.0.0.1:{port}", "--steps", "30", "--rate-hz", "0"]
            assert sim_robot.main([*argv, "--robot-id", "arm-1"]) == 0
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    out = capsys.readouterr().out
    assert "arm-1: steps=30 " in out
    rate = float(out.split("rate=")[1].split("/s")[0])
    assert rate > 0
