"""Fixtures for the deployment tests: the built-in arm and a small bundle."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tether.policy.initialize import init_bundle
from tether.sim import arm_spec
from tether.spec import RobotSpec

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def arm() -> RobotSpec:
    return arm_spec()


@pytest.fixture(scope="session")
def bundle_path(tmp_path_factory: pytest.TempPathFactory, arm: RobotSpec) -> Path:
    path = tmp_path_factory.mktemp("bundle") / "arm"
    init_bundle(path, arm, hidden_sizes=(64, 64), seed=3)
    return path
