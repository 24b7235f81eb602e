"""``tether serve --openpi-port``: the flag starts the endpoint; a bad port stops startup."""

from __future__ import annotations

import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.serving.test_cli_serve import TETHER, announce_serve


def test_openpi_port_flag_serves_healthz(bundle_path: Path) -> None:
    proc, announced = announce_serve(bundle_path, "--openpi-port", "0")
    try:
        match = re.search(r"openpi port (\d+)", announced)
        assert match is not None, announced
        port = int(match.group(1))
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                    assert r.status == 200
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_an_openpi_port_out_of_range_is_refused(bundle_path: Path) -> None:
    done = subprocess.run(
        [*TETHER, "serve", "--bundle", str(bundle_path), "--openpi-port", "70000"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "openpi port must be between 0 and 65535, got 70000" in done.stderr
