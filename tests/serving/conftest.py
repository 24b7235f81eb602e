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
from tether.serving.config import ServerConfig
from tether.serving.served_spec import ServedSpec
from tether.serving.server import PolicyServer
from tether.serving.supervision import SupervisorFactory
from tether.spec import RobotSpec

__all__ = ["admin", "arm", "base_bundle", "bundle_path", "loop", "spec", "supervisor"]

torch.set_num_threads(1)


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
