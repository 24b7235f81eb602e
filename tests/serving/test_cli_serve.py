"""``tether serve`` as a real process: it serves, and SIGTERM/SIGINT stop it with exit 0."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tether.serving.client import PolicyClient
from tether.spec import RobotSpec

# The console script's entry point, run by this interpreter (no reliance on PATH).
TETHER = (sys.executable, "-c", "from tether.cli.app import main; main()")


def start_serve(bundle: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            *TETHER,
            "serve",
            "--bundle",
            str(bundle),
            "--port",
            "0",
            "--metrics-port",
            "0",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"listening on (\S+),", line)
    if match is None:
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"tether serve did not start (exit {proc.returncode}): {line!r} {err}")
    return proc, match.group(1)


def test_serve_answers_and_stops_gracefully_on_sigint(bundle_path: Path, arm: RobotSpec) -> None:
    proc, address = start_serve(bundle_path)
    try:
        with PolicyClient(address) as client:
            result = client.get_action(np.zeros(arm.obs_dim), deterministic=True)
            assert result.action.shape == (arm.act_dim,)
        proc.send_signal(signal.SIGINT)  # Ctrl-C; the TLS test below sends SIGTERM
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_bad_tls_path_fails_startup_with_a_clear_message(bundle_path: Path, tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(
        f"security:\n  tls_cert_file: {tmp_path / 'missing.pem'}\n"
        f"  tls_key_file: {tmp_path / 'missing.key'}\n"
    )
    result = subprocess.run(
        [
            *TETHER,
            "serve",
            "--bundle",
            str(bundle_path),
            "--port",
            "0",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "tls_cert_file" in result.stderr
    assert "missing.pem does not exist" in result.stderr.replace("\n", "")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_tls_serving_with_a_self_signed_certificate(
    bundle_path: Path, arm: RobotSpec, tmp_path: Path
) -> None:
    from tether.serving.client import ClientOptions

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    config = tmp_path / "serve.yaml"
    config.write_text(f"security:\n  tls_cert_file: {cert}\n  tls_key_file: {key}\n")
    proc, address = start_serve(bundle_path, "--config", str(config))
    try:
        options = ClientOptions(tls_root_cert_file=cert, tls_server_name="localhost")
        with PolicyClient(address, options=options) as client:
            assert client.get_action(np.zeros(arm.obs_dim)).action.shape == (arm.act_dim,)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
