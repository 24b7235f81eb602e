"""Fixtures for the serving tests: the built-in arm, a small bundle, servers on port 0."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.arm_fixtures import arm, bundle_path
from tests.serving.admin_harness import admin, loop
from tests.serving.serving_harness import (
    MakeServer,
    RunningServer,
    make_engine,
    relaxed_limits,
    server_config,
)

# Real bundles and supervisors for the edge tests of versions (AdminService, routing).
from tests.versions.builders import base_bundle, spec, supervisor
from tether.policy.engine import PolicyEngine
from tether.policy.initialize import init_bundle
from tether.serving.config import ServerConfig
from tether.serving.served_spec import ServedSpec
from tether.serving.server import PolicyServer
from tether.serving.supervision import SupervisorFactory
from tether.spec import RobotSpec

__all__ = ["admin", "arm", "base_bundle", "bundle_path", "loop", "spec", "supervisor"]

torch.set_num_threads(1)


# The chunk policy: a state vector and one camera image in, HORIZON actions out.
IMAGE_SHAPE = (16, 16, 3)
HORIZON = 4


@pytest.fixture(scope="session")
def chunk_bundle_path(tmp_path_factory: pytest.TempPathFactory, arm: RobotSpec) -> Path:
    """A small CNN chunk bundle made by init_bundle (milliseconds, same seed, same bytes)."""
    path = tmp_path_factory.mktemp("chunk-bundle") / "arm-chunk"
    init_bundle(
        path,
        arm,
        hidden_sizes=(32, 32),
        seed=5,
        images=[("image", IMAGE_SHAPE)],
        horizon=HORIZON,
        conv_channels=(4, 8),
        state_input="state",
    )
    return path


@pytest.fixture
def chunk_engine(chunk_bundle_path: Path) -> PolicyEngine:
    return make_engine(chunk_bundle_path)


@pytest.fixture
def engine(bundle_path: Path) -> PolicyEngine:
    return make_engine(bundle_path)


@pytest.fixture
def make_server(arm: RobotSpec, bundle_path: Path) -> Iterator[MakeServer]:
    started: list[RunningServer] = []

    def make(
        config: ServerConfig | None = None,
        *,
        engine: Any = "default",
        supervisors: SupervisorFactory | None = None,
        **kwargs: Any,
    ) -> RunningServer:
        server = PolicyServer(
            config or server_config(),
            spec=ServedSpec.from_robot_spec(arm),
            supervisors=supervisors or SupervisorFactory(arm, limits=relaxed_limits(arm)),
            engine=make_engine(bundle_path) if engine == "default" else engine,
            **kwargs,
        )
        running = RunningServer(server)
        started.append(running)
        return running

    yield make
    for running in started:
        running.stop()
