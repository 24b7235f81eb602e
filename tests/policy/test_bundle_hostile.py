"""Hostile bundle directories get a clear BundleError, never a hang or a traceback."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from tether.policy import BundleFormatError, PolicyBundle, load_bundle
from tether.policy.bundle import MANIFEST_FILE, WEIGHTS_FILE


def _copy(bundle: PolicyBundle, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(bundle.path, target)
    return target


def _load_within(path: Path, seconds: float = 10.0) -> BaseException | None:
    """load_bundle in a thread: a hang is a failure, not a stuck test run."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            load_bundle(path)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"load_bundle({path}) still running after {seconds} s"
    return outcome[0]


def test_a_fifo_as_the_weights_file_is_refused_without_hanging(
    bundle: PolicyBundle, tmp_path: Path
) -> None:
    path = _copy(bundle, tmp_path)
    (path / WEIGHTS_FILE).unlink()
    os.mkfifo(path / WEIGHTS_FILE)
    exc = _load_within(path)
    assert isinstance(exc, BundleFormatError), exc
    assert "not a regular file" in str(exc)


def test_a_directory_as_the_weights_file_is_refused(bundle: PolicyBundle, tmp_path: Path) -> None:
    path = _copy(bundle, tmp_path)
    (path / WEIGHTS_FILE).unlink()
    (path / WEIGHTS_FILE).mkdir()
    exc = _load_within(path)
    assert isinstance(exc, BundleFormatError), exc
    assert "a directory" in str(exc)


def test_a_link_out_of_the_bundle_is_refused(bundle: PolicyBundle, tmp_path: Path) -> None:
    path = _copy(bundle, tmp_path)
    outside = tmp_path / "elsewhere.safetensors"
    (path / WEIGHTS_FILE).rename(outside)
    (path / WEIGHTS_FILE).symlink_to(outside)
    exc = _load_within(path)
    assert isinstance(exc, BundleFormatError), exc
    assert "outside the bundle directory" in str(exc)


def test_an_unknown_manifest_field_is_refused_by_name(bundle: PolicyBundle, tmp_path: Path) -> None:
    path = _copy(bundle, tmp_path)
    doc = json.loads((path / MANIFEST_FILE).read_text())
    doc["architecture"]["dropout"] = 0.1
    (path / MANIFEST_FILE).write_text(json.dumps(doc))
    with pytest.raises(BundleFormatError, match=r"'architecture\.dropout'"):
        load_bundle(path)


def test_a_deeply_nested_manifest_is_a_format_error(bundle: PolicyBundle, tmp_path: Path) -> None:
    path = _copy(bundle, tmp_path)
    (path / MANIFEST_FILE).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BundleFormatError, match="nested too deeply"):
        load_bundle(path)
