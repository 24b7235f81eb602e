"""Errors of the Ray backend.

TetherError
└── FleetError              (anything the fleet backend refuses or cannot do)
    └── RayMissingError     (``--backend ray`` without the ``ray`` extra)
"""

from __future__ import annotations

from tether.errors import TetherError


class FleetError(TetherError, RuntimeError):
    """The fleet backend could not start or run."""


class RayMissingError(FleetError, ImportError):
    """Ray is not installed: the ``ray`` extra was not."""
