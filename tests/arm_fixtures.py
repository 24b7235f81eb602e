"""Session fixtures shared by the test packages that serve the built-in arm: its spec and
a small bundle for it (64x64, seed 3). A conftest re-exports them by importing them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.policy.initialize import init_bundle
from tether.sim import arm_spec
from tether.spec import RobotSpec


@pytest.fixture(scope="session")
def arm() -> RobotSpec:
    return arm_spec()


@pytest.fixture(scope="session")
def bundle_path(tmp_path_factory: pytest.TempPathFactory, arm: RobotSpec) -> Path:
    path = tmp_path_factory.mktemp("bundle") / "arm"
    init_bundle(path, arm, hidden_sizes=(64, 64), seed=3)
    return path
