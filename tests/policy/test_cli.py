"""`tether export` and `tether inspect` through typer, as a user would call them."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from tether.cli import export as export_cli, inspect as inspect_cli
from tether.policy import PolicyBundle


def _app() -> typer.Typer:
    app = typer.Typer()
    export_cli.register(app)
    inspect_cli.register(app)
    return app


def test_inspect_prints_manifest_and_verdict(bundle: PolicyBundle) -> None:
    result = CliRunner().invoke(_app(), ["inspect", str(bundle.path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "verified" in result.output
    assert bundle.version.weights_sha256 in result.output
    assert "j0_pos" in result.output


def test_inspect_fails_on_a_tampered_bundle(bundle: PolicyBundle) -> None:
    assert bundle.path is not None
    weights = bundle.path / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0xFF
    weights.write_bytes(bytes(data))
    result = CliRunner().invoke(_app(), ["inspect", str(bundle.path)])
    assert result.exit_code == 1
    assert "FAILED: BundleHashMismatch" in result.output
    assert "init-seed3" in result.output  # the manifest is still shown
    as_json = CliRunner().invoke(_app(), ["inspect", "--json", str(bundle.path)])
    assert as_json.exit_code == 1
    doc = json.loads(as_json.output)
    assert doc["ok"] is False
    assert doc["error_type"] == "BundleHashMismatch"
    assert doc["manifest"]["version"]["id"] == bundle.version.id


def test_inspect_missing_bundle(tmp_path: Path) -> None:
    result = CliRunner().invoke(_app(), ["inspect", str(tmp_path / "none")])
    assert result.exit_code == 1
    assert "BundleNotFound" in result.output


def test_export_command_writes_a_module(tmp_path: Path, bundle: PolicyBundle) -> None:
    out = tmp_path / "policy.ts"
    result = CliRunner().invoke(_app(), ["export", str(bundle.path), str(out)])
    assert result.exit_code == 0, result.output
    assert out.is_file()
    assert "max action difference" in result.output
    again = CliRunner().invoke(_app(), ["export", str(bundle.path), str(out)])
    assert again.exit_code == 1
    assert "already exists" in again.output
    assert "--overwrite" in again.output
    assert "overwrite=True" not in again.output
    replaced = CliRunner().invoke(_app(), ["export", str(bundle.path), str(out), "--overwrite"])
    assert replaced.exit_code == 0, replaced.output


def test_inspect_shows_each_training_leg_on_its_own_line() -> None:
    nested = (
        "tether pretrain (b, seed 2), continuing 'tether pretrain (a, seed 1), continuing "
        '"tether pretrain (first)" (10 steps)\' (20 steps)'
    )
    nested = nested.replace("\\'", "\\'")
    legs = inspect_cli.source_lineage(
        "tether pretrain (c, seed 3), continuing " + repr(nested) + " (30 steps)"
    )
    assert len(legs) == 4
    assert legs[0].startswith("tether pretrain (c, seed 3)")
    assert legs[-1] == "tether pretrain (first)"
    assert all("\\" not in leg and "continuing" not in leg for leg in legs)


def test_every_command_and_option_has_help() -> None:
    for command in ("export", "inspect"):
        result = CliRunner().invoke(_app(), [command, "--help"])
        assert result.exit_code == 0
        assert "--help" in result.output
    for module in (export_cli, inspect_cli):
        fn = getattr(module, module.__name__.rsplit(".", 1)[1])
        assert fn.__doc__
        for name, hint in fn.__annotations__.items():
            if name != "return":
                assert "help=" in str(hint) or "help" in repr(hint), name
