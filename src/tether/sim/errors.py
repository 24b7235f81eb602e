"""Errors raised by the simulated arm.

TetherError
└── SimError
    └── SimConfigError   (a dynamics value, range or schedule that cannot be used)
"""

from __future__ import annotations

from tether.errors import TetherError


class SimError(TetherError):
    """Base class of everything ``tether.sim`` raises on purpose."""


class SimConfigError(SimError, ValueError):
    """A dynamics value, randomization range, drift schedule or env setting that cannot be used."""
