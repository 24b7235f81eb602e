"""``tether serve --model-dir DIR`` without ``--bundle``: which bundle goes live at start.

The container's entry point passes only the mounted model directory, so the choice
must be unambiguous: the bundle at DIR itself, or DIR's only bundle; several are
refused by name (the operator names the live one), none is refused with what to mount.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tether.cli.app import app
from tether.cli.serve import startup_bundle
from tether.policy.manifest import MANIFEST_FILE


def bundle_at(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / MANIFEST_FILE).write_text("{}")  # only its presence is read here
    return path


def test_the_bundle_at_the_model_dir_itself_wins(tmp_path: Path) -> None:
    bundle_at(tmp_path)
    bundle_at(tmp_path / "v2")
    assert startup_bundle(tmp_path) == tmp_path


def test_a_single_bundle_under_the_model_dir_is_served(tmp_path: Path) -> None:
    only = bundle_at(tmp_path / "arm-v1")
    (tmp_path / "notes").mkdir()
    assert startup_bundle(tmp_path) == only


def test_several_bundles_are_refused_by_name(tmp_path: Path) -> None:
    bundle_at(tmp_path / "v1")
    bundle_at(tmp_path / "v2")
    with pytest.raises(ValueError, match=r"holds 2 bundles \(v1, v2\); pass --bundle"):
        startup_bundle(tmp_path)


def test_an_empty_model_dir_says_what_to_mount(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="holds no bundle"):
        startup_bundle(tmp_path)


def test_serve_without_bundle_or_model_dir_says_what_to_pass(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["serve", "--port", "0"], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "pass --bundle, or --model-dir" in result.output


def test_serve_with_an_ambiguous_model_dir_fails_before_binding(tmp_path: Path) -> None:
    bundle_at(tmp_path / "v1")
    bundle_at(tmp_path / "v2")
    args = ["serve", "--model-dir", str(tmp_path), "--port", "0"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "pass --bundle to name the one that goes live" in result.output
