"""The image's health check script (Docker HEALTHCHECK, compose's service_healthy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.fleet import fleet, port_free_on_all
from tests.deploy.repo_files import DEPLOY, load_script
from tether.spec import RobotSpec

healthcheck = load_script(DEPLOY / "healthcheck.py")


def test_healthy_only_while_a_policy_is_live(
    bundle_path: Path, arm: RobotSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    with fleet(bundle_path, arm, addresses=("127.0.0.1",)) as (port, (server,)):
        target = f"127.0.0.1:{port}"
        assert healthcheck.main(["healthcheck", target]) == 0
        server.call(server.server.set_engine(None))
        assert healthcheck.main(["healthcheck", target]) == 1
    assert "SERVING" in capsys.readouterr().out


def test_no_server_is_unhealthy(capsys: pytest.CaptureFixture[str]) -> None:
    port = port_free_on_all(("127.0.0.1",))
    assert healthcheck.main(["healthcheck", f"127.0.0.1:{port}"]) == 1
    assert "UNAVAILABLE" in capsys.readouterr().err
