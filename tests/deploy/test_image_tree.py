"""The image, without a container engine: its file tree built as the Dockerfile builds it
(``tests/deploy/image_tree.py``: the same install commands in a fresh venv), then its
entry point run against a model directory, as ``docker run -v DIR:/models`` would.

It serves, the image's health check passes, a new bundle dropped in the model
directory is registered on SIGHUP and another by the admin RPC (the image's own
``tether admin reload``) in the same process, the compose robot script drives the arm
through it, and SIGTERM drains it to exit 0. The fresh install costs about 75 s of CPU:
``pytest -m slow``.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.deploy.image_tree import ImageTree, build_tree
from tests.deploy.repo_files import DEPLOY
from tether.policy.initialize import init_bundle
from tether.serving.admin_client import AdminClient
from tether.serving.client import PolicyClient
from tether.spec import RobotSpec

TOKEN = "image-test-operator-token"
ANNOUNCE = re.compile(r"listening on (\S+), policy version (\d+).* admin port (\d+)")


def loopback_config(tree: ImageTree, tmp_path: Path) -> Path:
    """The image's server config with every port 0 on 127.0.0.1 (tests bind loopback only)."""
    image_config = tree.root / "etc" / "tether" / "server.yaml"
    assert image_config.read_text() == (DEPLOY / "server.yaml").read_text()
    values = yaml.safe_load(image_config.read_text())
    values.update(host="127.0.0.1", metrics_host="127.0.0.1", port=0, metrics_port=0)
    path = tmp_path / "loopback.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def versions(admin: AdminClient) -> dict[int, str]:
    return {v.id: v.bundle_path for v in admin.list_versions().versions}


def wait_for_versions(admin: AdminClient, count: int, timeout_s: float = 120) -> dict[int, str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = versions(admin)
        if len(found) >= count:
            return found
        time.sleep(0.2)
    raise AssertionError(f"expected {count} versions within {timeout_s} s, got {versions(admin)}")


def served_version(client: PolicyClient, obs: np.ndarray) -> int:
    version = client.get_action(obs).version
    assert version is not None
    return version.id


def image_cli(
    tree: ImageTree, *args: str, timeout_s: float = 180
) -> subprocess.CompletedProcess[str]:
    tether = tree.root / "opt" / "tether" / "bin" / "tether"
    return subprocess.run(
        [str(tether), *args], env=tree.env, capture_output=True, text=True, timeout=timeout_s
    )


@pytest.mark.slow
def test_image_tree_serves_the_model_volume_and_reloads_in_place(
    tmp_path: Path, arm: RobotSpec
) -> None:
    tree = build_tree(tmp_path / "image")
    print("not done as the Dockerfile does:", *tree.skipped, sep="\n  ")
    assert (tree.root / "opt" / "tether" / "bin" / "tether").is_file()
    site = tree.root / "opt" / "tether" / "lib"
    assert list(site.glob("python3*/site-packages/torch-*+cpu.dist-info")), "not the CPU torch"
    init_bundle(tree.volume, arm, hidden_sizes=(64, 64), seed=3, version_id=1, overwrite=True)
    tokens = tree.root / "run" / "secrets" / "admin-tokens"
    tokens.parent.mkdir(parents=True)
    tokens.write_text(f"operator ops {TOKEN}\n")
    # What `docker run IMAGE ARGS` appends to the entry point (the CMD slot).
    args = ["--admin-tokens", str(tokens), "--config", str(loopback_config(tree, tmp_path))]
    args += ["--admin-port", "0"]
    proc = subprocess.Popen(
        [*tree.entrypoint, *args],
        cwd=tree.root,
        env=tree.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = ANNOUNCE.search(line)
        assert match is not None, (line, proc.stderr.read() if proc.poll() is not None else "")
        address, live, admin_port = match.group(1), int(match.group(2)), match.group(3)
        assert live == 1

        health = [*tree.healthcheck[:-1], address]  # the image's check, on this port
        assert subprocess.run(health, env=tree.env, timeout=60).returncode == 0

        with (
            PolicyClient(address) as client,
            AdminClient(f"127.0.0.1:{admin_port}", TOKEN) as admin,
        ):
            obs = np.zeros(arm.obs_dim, dtype=np.float32)
            assert served_version(client, obs) == 1
            assert len(versions(admin)) == 1

            init_bundle(tree.volume / "v2", arm, hidden_sizes=(64, 64), seed=4, version_id=2)
            proc.send_signal(signal.SIGHUP)
            found = wait_for_versions(admin, 2)
            assert any(p.endswith("/v2") for p in found.values())

            init_bundle(tree.volume / "v3", arm, hidden_sizes=(64, 64), seed=5, version_id=3)
            reload = image_cli(
                tree, "admin", "reload", "--target", f"127.0.0.1:{admin_port}", "--token", TOKEN
            )
            assert reload.returncode == 0, reload.stderr
            found = wait_for_versions(admin, 3)
            assert any(p.endswith("/v3") for p in found.values())

            assert proc.poll() is None  # reloaded in place: the same process serves
            assert served_version(client, obs) == 1  # candidates, not live

        robot = tree.root / "etc" / "tether" / "sim_robot.py"
        run = subprocess.run(
            ["python", str(robot), "--target", address, "--steps", "30", "--rate-hz", "0"],
            env=tree.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert run.returncode == 0, run.stderr
        assert "steps=30" in run.stdout

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
