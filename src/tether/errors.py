"""The root of tether's exception hierarchy.

Every package defines its own subclasses (``BundleError``, ``SafetyConfigError``,
``ServingError``, ...) so callers can catch one layer's failures without catching
another's. Messages name the thing, what was expected, what was found, and what to do.

    TetherError
    ├── SpecError              (tether.spec: an inconsistent RobotSpec)
    ├── ConfigError            (tether.config: a config file or field that cannot be used)
    └── <one subclass tree per package>
"""

from __future__ import annotations


class TetherError(Exception):
    """Base class of every error tether raises on purpose."""


class SpecError(TetherError, ValueError):
    """A RobotSpec whose fields contradict each other."""


class ConfigError(TetherError, ValueError):
    """A configuration value or file that cannot be used."""
