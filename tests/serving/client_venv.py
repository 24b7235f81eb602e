"""A venv holding the real third-party clients (openpi-client, tritonclient[grpc]).

Their pins conflict with the project's (numpy<2, protobuf<7), so the tests run them in
a venv of their own, built once from ``clients/requirements.txt`` with pip (from the
machine's configured index) and reused while that file is unchanged. The location is
``$TETHER_CLIENT_VENV``, else ``.venv-clients`` at the repository root. A failed build
fails the test: these tests are never skipped.

Running the clients in their own process also keeps tritonclient's copy of the
``inference`` protobuf package out of the process that serves tether's copy (one
descriptor pool cannot hold both).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import venv
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = Path(__file__).with_name("clients")
REQUIREMENTS = CLIENTS / "requirements.txt"


def _location() -> Path:
    return Path(os.environ.get("TETHER_CLIENT_VENV", ROOT / ".venv-clients"))


def client_python() -> Path:
    """The venv's python, built (under a file lock) if missing or stale."""
    where = _location()
    where.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    python = where / "bin" / "python"
    stamp = where / ".requirements-sha256"
    with open(f"{where}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.exists() and stamp.exists() and stamp.read_text() == digest:
            return python
        venv.EnvBuilder(clear=True, with_pip=True).create(where)
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"cannot build the client venv at {where}: pip install -r {REQUIREMENTS} "
                f"failed:\n{done.stderr[-4000:]}"
            )
        stamp.write_text(digest)
    return python


@pytest.fixture(scope="session")
def clients_python() -> Path:
    return client_python()


def run_client(python: Path, script: str, *args: str, timeout_s: float = 120.0) -> Any:
    """Run ``clients/<script>`` with ``args`` in the client venv; its JSON report."""
    done = subprocess.run(
        [str(python), str(CLIENTS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    if done.returncode != 0:
        raise AssertionError(
            f"{script} exited {done.returncode}:\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


__all__ = ["client_python", "clients_python", "run_client"]
