"""The failover of ``test_dns_failover.py`` with ``tether serve`` processes and SIGKILL.

Three ``tether serve`` processes on 127.0.0.1-3 (one port), found through the DNS
server on loopback; the session's server is killed with SIGKILL mid-run (no drain, no
goodbye: the kernel closes its sockets) and the session is served by a survivor within
the watchdog deadline's bound. Starting three servers costs three torch imports:
``pytest -m slow``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.deploy.dns_stub import FleetDns
from tests.deploy.fleet import ADDRESSES, port_free_on_all
from tests.deploy.test_dns_failover import DEADLINE_S, FLEET, OPTIONS, SLACK_S, timed_step
from tether.serving.client import PolicyClient
from tether.spec import RobotSpec

TETHER = (sys.executable, "-c", "from tether.cli.app import main; main()")
ANNOUNCE = re.compile(r"listening on (\S+),.* metrics port (\d+),")


def start(bundle: Path, host: str, port: int) -> subprocess.Popen[str]:
    args = ["serve", "--bundle", str(bundle), "--host", host, "--port", str(port)]
    return subprocess.Popen(
        [*TETHER, *args, "--metrics-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def metrics_port(proc: subprocess.Popen[str]) -> int:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = ANNOUNCE.search(line)
    assert match is not None, f"tether serve did not start: {line!r}"
    return int(match.group(2))


def sessions_open(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    match = re.search(r"^tether_sessions_open (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


@pytest.mark.slow
def test_session_fails_over_when_its_server_process_is_sigkilled(
    bundle_path: Path, arm: RobotSpec
) -> None:
    port = port_free_on_all(ADDRESSES)
    procs = [start(bundle_path, host, port) for host in ADDRESSES]
    try:
        metrics = [metrics_port(p) for p in procs]
        obs = np.zeros(arm.obs_dim, dtype=np.float32)
        with (
            FleetDns(FLEET, ADDRESSES) as dns,
            PolicyClient(dns.target(port), options=OPTIONS) as client,
            client.session(arm, robot_id="arm-0", control_deadline_s=DEADLINE_S) as session,
        ):
            for _ in range(10):
                assert not session.step(obs).from_watchdog
            victim = [sessions_open(m) for m in metrics].index(1.0)
            procs[victim].kill()  # SIGKILL
            procs[victim].wait(10)
            killed_at = time.monotonic()
            steps = []
            for _ in range(200):  # bounded
                steps.append(timed_step(session, obs))
                if not steps[-1][0].from_watchdog:
                    break
            back_after_s = time.monotonic() - killed_at
            timeline = [(round(t, 3), r.reason[:60]) for r, t in steps]
            assert not steps[-1][0].from_watchdog, timeline
            assert max(t for _, t in steps) <= DEADLINE_S + SLACK_S, timeline
            assert back_after_s <= 2 * DEADLINE_S + SLACK_S, timeline
            assert session.reopens == 1
            survivors = [sessions_open(m) for i, m in enumerate(metrics) if i != victim]
            assert sorted(survivors) == [0.0, 1.0]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
