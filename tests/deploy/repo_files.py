"""The repository's deployment files, as the tests read them."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def load_all(path: Path) -> list[dict[str, Any]]:
    """Every YAML document in ``path`` (empty ones skipped)."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def load_script(path: Path) -> ModuleType:
    """A script under ``deploy/`` as a module (they are copied into the image, not packaged)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
