"""Fixtures for the deployment tests: the built-in arm and a small bundle."""

from __future__ import annotations

import torch

from tests.arm_fixtures import arm, bundle_path

__all__ = ["arm", "bundle_path"]

torch.set_num_threads(1)
