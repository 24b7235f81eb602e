"""A real AdminService for the edge tests of versions: tokens, the server, its loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.versions.builders import make_engine
from tether.policy.bundle import PolicyBundle
from tether.policy.engine import PolicyEngine
from tether.safety.degradation import DegradationMachine
from tether.safety.supervisor import Supervisor
from tether.serving.admin import AdminServicer, start_admin_server
from tether.serving.admin_auth import AdminAuth, AdminIdentity, AdminRole, AdminToken
from tether.serving.admin_client import AdminClient
from tether.serving.bundle_check import for_robot
from tether.spec import RobotSpec
from tether.versions.model_dir import load_into
from tether.versions.registry import ModelRegistry
from tether.versions.routing import TrafficRouter
from tether.versions.server_gate import ServerGate, ServerGateConfig

OPERATOR = "op-" + "a" * 30
VIEWER = "view-" + "b" * 30
AUTH = AdminAuth(
    [
        AdminToken(OPERATOR, AdminIdentity("alice", AdminRole.OPERATOR)),
        AdminToken(VIEWER, AdminIdentity("victor", AdminRole.VIEWER)),
    ]
)


@dataclass
class Admin:
    target: str
    registry: ModelRegistry[PolicyEngine]
    router: TrafficRouter
    degradation: DegradationMachine
    models: Path

    def client(self, token: str = OPERATOR) -> AdminClient:
        return AdminClient(self.target, token, timeout_s=20.0)


@pytest.fixture
def admin(
    base_bundle: PolicyBundle,
    tmp_path: Path,
    supervisor: Supervisor,
    spec: RobotSpec,
    loop: asyncio.AbstractEventLoop,
) -> Iterator[Admin]:
    """A real AdminService with version 1 live, served from its own event-loop thread; its
    engine factory refuses bundles for another robot, as ``tether serve``'s does."""
    registry: ModelRegistry[PolicyEngine] = ModelRegistry()
    load_into(registry, tmp_path / "base", make_engine)
    router = TrafficRouter(registry)
    degradation = DegradationMachine()
    models = tmp_path / "models"
    models.mkdir()
    servicer = AdminServicer(
        registry=registry,
        router=router,
        auth=AUTH,
        engine_factory=for_robot(make_engine, spec, base_bundle),
        model_dir=models,
        promotion=ServerGate(registry, router, supervisor, ServerGateConfig()),
        degradation=degradation,
    )
    future = asyncio.run_coroutine_threadsafe(start_admin_server(servicer, AUTH), loop)
    server, port = future.result(10)
    try:
        yield Admin(f"127.0.0.1:{port}", registry, router, degradation, models)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(10)


@pytest.fixture(scope="session")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop thread for every admin server of these tests (grpc.aio binds to a loop)."""
    event_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=event_loop.run_forever, daemon=True)
    thread.start()
    yield event_loop
    event_loop.call_soon_threadsafe(event_loop.stop)
    thread.join(10)
    event_loop.close()
