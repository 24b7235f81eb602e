"""``tether admin ...`` against a real AdminService: readable tables, refusals exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.serving.admin_harness import OPERATOR, VIEWER, Admin
from tests.versions.builders import derived, nudged
from tether.cli.admin import parse_weights
from tether.cli.app import app
from tether.policy.bundle import PolicyBundle

runner = CliRunner()


def _admin(admin: Admin, *args: str, token: str = OPERATOR) -> tuple[int, str]:
    result = runner.invoke(
        app,
        ["admin", *args, "--target", admin.target],
        env={"TETHER_ADMIN_TOKEN": token, "COLUMNS": "250"},
    )
    return result.exit_code, result.output


def test_list_load_traffic_promote_rollback_in_tables(
    admin: Admin, base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    derived(base_bundle, tmp_path / "v2", 2, "second", nudged)
    code, out = _admin(admin, "list")
    assert code == 0, out
    assert "init-seed0" in out
    assert "live: 1" in out
    code, out = _admin(admin, "load", str(tmp_path / "v2"))
    assert code == 0, out
    assert "second" in out
    assert "candidate" in out
    code, out = _admin(admin, "promote", "2", "--skip-gate", "--reason", "bench ok")
    assert code == 0, out
    assert "live" in out
    code, out = _admin(admin, "traffic", "1=1", "2=3")
    assert code == 0, out
    assert "25.0%" in out
    assert "75.0%" in out
    code, out = _admin(admin, "rollback", "--reason", "jerky")
    assert code == 0, out
    assert "rolled back version 2" in out
    code, out = _admin(admin, "list")
    assert "rejected" in out
    assert "last-known-good: none" in out


def test_list_names_a_running_rollback_check(
    admin: Admin, base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    derived(base_bundle, tmp_path / "v2", 2, "second", nudged)
    assert _admin(admin, "load", str(tmp_path / "v2"))[0] == 0
    assert _admin(admin, "promote", "2", "--skip-gate", "--reason", "bench ok")[0] == 0
    code, out = _admin(admin, "list")
    assert code == 0, out
    assert "rollback check" not in out
    admin.router.start_check(1, 0.5)  # what the rollback monitor does on an alarm
    code, out = _admin(admin, "list")
    assert code == 0, out
    assert "rollback check: 1 beside live in 50% of episodes" in out


def test_refusals_print_the_reason_and_exit_1(admin: Admin) -> None:
    code, out = _admin(admin, "rollback", token=VIEWER)
    assert code == 1
    assert "PERMISSION_DENIED" in out
    code, out = _admin(admin, "list", token="")
    assert code == 1
    assert "UNAUTHENTICATED" in out
    code, out = _admin(admin, "unload", "1")
    assert code == 1
    assert "is live" in out


def test_traffic_pairs_are_parsed_strictly() -> None:
    assert parse_weights(["1=0.9", "2=0.1"]) == {1: 0.9, 2: 0.1}
    for bad in ("1", "a=1", "1=x"):
        with pytest.raises(typer.BadParameter, match="VERSION=WEIGHT"):
            parse_weights([bad])


def test_every_admin_command_has_help() -> None:
    result = runner.invoke(app, ["admin", "--help"])
    assert result.exit_code == 0
    for name in ("list", "load", "unload", "traffic", "promote", "rollback", "resume", "reload"):
        assert name in result.output
