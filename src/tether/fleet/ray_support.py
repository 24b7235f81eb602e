"""Ray, imported on demand, with one clear error when the extra is missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from tether.fleet.errors import RayMissingError

INSTALL_HINT = "pip install -e '.[ray]'"


def require_ray() -> ModuleType:
    """The ``ray`` module, or :class:`RayMissingError` naming the extra to install."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise RayMissingError(
            f"--backend ray needs Ray, which is not installed ({exc}); install the extra: "
            f"{INSTALL_HINT}"
        ) from exc


def ray_available() -> bool:
    """Whether ``import ray`` works here (tests skip the ``ray`` suite when it does not)."""
    try:
        require_ray()
    except RayMissingError:
        return False
    return True
