"""``tether serve`` as a real process: it serves, and SIGTERM/SIGINT stop it with exit 0."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.safety.builders import seven_joint_spec, someone_elses_arm
from tether.policy import init_bundle
from tether.serving.client import PolicyClient
from tether.spec import RobotSpec

# The console script's entry point, run by this interpreter (no reliance on PATH).
TETHER = (sys.executable, "-c", "from tether.cli.app import main; main()")


def start_serve(bundle: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``tether serve`` on port 0; return the process and the address it announced."""
    proc, line = announce_serve(bundle, *extra)
    match = re.search(r"listening on (\S+),", line)
    assert match is not None
    return proc, match.group(1)


def announce_serve(bundle: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``tether serve`` on port 0; return the process and its announce line."""
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
    return proc, line


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


def _listening_port(proc: subprocess.Popen[str], address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def _busy_port() -> tuple[socket.socket, int]:
    """A port held by a plain listening socket, as another program would hold it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]


def _serve_fails(bundle: Path, *args: str, tmp_path: Path | None = None) -> tuple[int, str]:
    out = subprocess.run(
        [*TETHER, "serve", "--bundle", str(bundle), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        check=False,
    )
    return out.returncode, out.stderr


def test_a_limits_file_makes_the_served_limits_stricter(bundle_path: Path, tmp_path: Path) -> None:
    limits = tmp_path / "cell.yaml"
    limits.write_text("velocity_limit_rad_s: [0.5, 0.5, 0.5, 0.5]\ncommand_staleness_s: 0.05\n")
    proc, address = start_serve(bundle_path, "--limits", str(limits))
    try:
        with PolicyClient(address) as client:
            served = json.loads(client.describe().safety_limits_json)
        assert served["velocity_limit_rad_s"] == [0.5, 0.5, 0.5, 0.5]
        assert served["command_staleness_s"] == 0.05
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_a_limits_file_that_loosens_is_refused_at_start(bundle_path: Path, tmp_path: Path) -> None:
    limits = tmp_path / "cell.yaml"
    limits.write_text("velocity_limit_rad_s: [9, 1, 1, 1]\n")
    code, err = _serve_fails(bundle_path, "--port", "0", "--limits", str(limits))
    assert code == 1
    assert "velocity_limit_rad_s[0] is 9.0" in err.replace("\n", "")
    assert "Traceback" not in err


def test_a_robot_whose_workspace_nothing_checks_is_warned_about(tmp_path: Path) -> None:
    bundle = tmp_path / "seven"
    init_bundle(bundle, seven_joint_spec(), hidden_sizes=(16, 16), seed=0)
    proc, _ = announce_serve(bundle)
    try:
        assert proc.stderr is not None
        logged, printed = proc.stderr.readline(), proc.stderr.readline()
        assert "'synthetic-7' declares a workspace" in logged
        assert printed.startswith("WARNING:")
        assert "nothing keeps its body inside the workspace" in printed
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_a_robot_model_gives_the_supervisor_its_body(tmp_path: Path) -> None:
    spec, model = someone_elses_arm(tmp_path)
    bundle = tmp_path / "my_arm"
    init_bundle(bundle, spec, hidden_sizes=(16, 16), seed=0)
    code, err = _serve_fails(bundle, "--port", "0", "--kinematics", str(model))
    assert code == 1
    assert "--kinematics and --end-effector go together" in err.replace("\n", " ")
    proc, address = start_serve(
        bundle, "--kinematics", str(model), "--end-effector", "end_effector"
    )
    try:
        with PolicyClient(address) as client:
            served = json.loads(client.describe().safety_limits_json)
        assert served["joint_names"] == list(spec.joint_names)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert "no kinematics" not in err  # the workspace and obstacle are checked now


def test_a_second_serve_on_a_port_in_use_is_refused(bundle_path: Path) -> None:
    """gRPC's default SO_REUSEPORT let a second server share the port and split its calls."""
    first, address = start_serve(bundle_path)
    try:
        port = _listening_port(first, address)
        code, err = _serve_fails(bundle_path, "--port", str(port), "--metrics-port", "0")
        assert code == 1
        assert f"127.0.0.1:{port}" in err
        assert "--port" in err
        assert "Traceback" not in err
        assert len(err.strip().splitlines()) <= 2, err
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)


def test_a_metrics_port_in_use_is_one_line_naming_the_port_and_the_flag(
    bundle_path: Path,
) -> None:
    sock, port = _busy_port()
    with sock:
        code, err = _serve_fails(bundle_path, "--port", "0", "--metrics-port", str(port))
    assert code == 1
    assert f"127.0.0.1:{port}" in err
    assert "--metrics-port" in err
    assert "Traceback" not in err
    assert "never awaited" not in err
    assert "Event loop" not in err
    assert len(err.strip().splitlines()) <= 2, err


def test_an_admin_port_in_use_is_refused(bundle_path: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("operator ops 0123456789abcdef0123\n")
    first_sock, port = _busy_port()
    # A plain socket without SO_REUSEPORT already refuses a reusing bind; a gRPC server on
    # the port is the case gRPC would share, so hold the port with one.
    first_sock.close()
    first, _address = start_serve(
        bundle_path, "--admin-tokens", str(tokens), "--admin-port", str(port)
    )
    try:
        code, err = _serve_fails(
            bundle_path,
            "--port",
            "0",
            "--metrics-port",
            "0",
            "--admin-tokens",
            str(tokens),
            "--admin-port",
            str(port),
        )
        assert code == 1
        assert str(port) in err
        assert "--admin-port" in err
        assert "Traceback" not in err
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)


ADMIN_TOKEN = "0123456789abcdef0123"


def _admin_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TETHER, "admin", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", "TETHER_ADMIN_TOKEN": ""},
        check=False,
    )


def test_tether_admin_works_as_documented(bundle_path: Path, tmp_path: Path) -> None:
    """docs/operations.md's `tether admin --target HOST:PORT --token TOKEN <command>`."""
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"operator ops {ADMIN_TOKEN}\n")
    sock, admin_port = _busy_port()
    sock.close()
    proc, policy = start_serve(
        bundle_path, "--admin-tokens", str(tokens), "--admin-port", str(admin_port)
    )
    admin = f"127.0.0.1:{admin_port}"
    try:
        group_form = _admin_cli("--target", admin, "--token", ADMIN_TOKEN, "list")
        assert group_form.returncode == 0, group_form.stderr
        assert "live: 1" in group_form.stdout
        command_form = _admin_cli("list", "--target", admin, "--token", ADMIN_TOKEN)
        assert command_form.returncode == 0, command_form.stderr
        assert "live: 1" in command_form.stdout
        wrong_port = _admin_cli("--target", policy, "--token", ADMIN_TOKEN, "list")
        assert wrong_port.returncode == 1
        assert "UNIMPLEMENTED" in wrong_port.stderr
        assert "--admin-port" in wrong_port.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_tether_admin_defaults_to_the_admin_port() -> None:
    from tether.cli.admin import DEFAULT_TARGET
    from tether.versions.facade import VersionsConfig

    assert f"127.0.0.1:{VersionsConfig().admin_port}" == DEFAULT_TARGET
    helped = _admin_cli("--help")
    assert helped.returncode == 0
    assert DEFAULT_TARGET in helped.stdout


def test_plaintext_off_loopback_is_warned_about_loudly() -> None:
    """`tether serve` prints this warning on stderr at start (tests bind loopback only)."""
    from tether.serving.security import exposure_warning

    assert exposure_warning("127.0.0.1", tls=False, token=False) is None
    assert exposure_warning("[::1]", tls=False, token=True) is None
    assert exposure_warning("localhost", tls=False, token=False) is None
    assert exposure_warning("0.0.0.0", tls=True, token=True) is None
    open_door = exposure_warning("0.0.0.0", tls=False, token=False)
    assert open_door is not None
    assert "anyone" in open_door
    leaked = exposure_warning("192.0.2.7", tls=False, token=True)
    assert leaked is not None
    assert "token in the clear" in leaked
