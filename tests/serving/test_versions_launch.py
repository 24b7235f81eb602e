"""``serve_versions`` in its own process: admin port, live swaps, SIGHUP reload, clean exit."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np

from tests.serving.admin_harness import OPERATOR
from tests.versions.builders import derived, nudged
from tether.policy.bundle import PolicyBundle
from tether.serving.admin_client import AdminClient
from tether.spec import RobotSpec
from tether.v1 import policy_pb2 as pb, policy_pb2_grpc as pb_grpc

_SCRIPT = """
import asyncio, sys
from pathlib import Path
from tether.serving.config import ServerConfig
from tether.versions.facade import VersionsConfig
from tether.serving.versions_launch import serve_versions

def announce(server, admin_port):
    print(f"ready {server.port} {admin_port}", flush=True)

asyncio.run(serve_versions(
    Path(sys.argv[1]),
    ServerConfig(port=0, metrics_port=None),
    VersionsConfig(model_dir=Path(sys.argv[2]), admin_tokens_file=Path(sys.argv[3]),
                   admin_port=0, reload_makes_live=True),
    announce=announce,
))
"""


def test_serve_with_versions_reloads_on_sighup_and_exits_cleanly(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    tokens = tmp_path / "tokens"
    tokens.write_text(f"operator alice {OPERATOR}\n")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, str(tmp_path / "base"), str(models), str(tokens)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.match(r"ready (\d+) (\d+)", line)
        assert match, line + (proc.stderr.read() if proc.stderr else "")
        port, admin_port = match.groups()
        obs = np.zeros(spec.obs_dim, dtype=np.float32)
        with (
            grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
            AdminClient(f"127.0.0.1:{admin_port}", OPERATOR) as admin,
        ):
            stub = pb_grpc.PolicyServiceStub(channel)
            request = pb.ActionRequest(observation=obs.tolist(), deterministic=True)
            assert stub.GetAction(request, timeout=10).version.policy_version == 1
            assert admin.list_versions().live_version == 1
            derived(base_bundle, models / "v2", 2, "v2", nudged)
            proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 30
            while admin.list_versions().live_version != 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert stub.GetAction(request, timeout=10).version.policy_version == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
