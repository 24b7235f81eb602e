"""Fixtures of the versions tests (defined in ``tests/versions/builders.py``)."""

from tests.versions.builders import base_bundle, one_thread, spec, supervisor

__all__ = ["base_bundle", "one_thread", "spec", "supervisor"]
