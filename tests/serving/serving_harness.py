"""A real PolicyServer on 127.0.0.1:0, run on its own event loop thread for a test.

Tests drive it with the real clients (blocking or asyncio); ``stop`` (or the fixture's
teardown) shuts it down gracefully, so nothing outlives the test.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from tether.policy.bundle import load_bundle
from tether.policy.config import EngineConfig
from tether.policy.engine import PolicyEngine
from tether.safety.limits import LimitsConfig, SafetyLimits
from tether.serving import event_loop
from tether.serving.config import ServerConfig
from tether.serving.server import PolicyServer
from tether.spec import RobotSpec

T = TypeVar("T")


class RunningServer:
    def __init__(self, server: PolicyServer) -> None:
        self.server = server
        # The loop tether's own entry points run (uvloop unless the config says otherwise).
        self.loop = event_loop.loop_factory(server.config.event_loop)()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.call(server.start())

    @property
    def address(self) -> str:
        return self.server.address

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def metric(self, name: str, **labels: str) -> float:
        value = self.server.metrics.registry.get_sample_value(name, labels or None)
        return 0.0 if value is None else float(value)

    def stop(self) -> None:
        if not self.loop.is_closed():
            self.call(self.server.stop(grace_s=1.0))
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
            self.loop.close()


def make_engine(path: Path) -> PolicyEngine:
    return PolicyEngine(load_bundle(path), EngineConfig(execution="eager"))


def server_config(**overrides: Any) -> ServerConfig:
    """Port 0 for both servers, no rate limit unless a test asks for one."""
    base: dict[str, Any] = {
        "port": 0,
        "metrics_port": 0,
        "admission": {"rate_limit_hz": 0},
    }
    base.update(overrides)
    return ServerConfig.model_validate(base)


# A loaded 2-core CI machine can delay a request past the supervisor's default 0.1 s
# staleness limit, which (correctly) turns the action into a backup. Tests that compare
# actions with the engine's own output use a generous limit; test_safety_path checks
# the stale case on purpose.
RELAXED = LimitsConfig(command_staleness_s=30.0)


def relaxed_limits(spec: RobotSpec) -> SafetyLimits:
    return SafetyLimits.from_spec(spec, RELAXED)


# The ``make_server`` fixture: builds and starts a server, stopped at teardown.
MakeServer = Callable[..., RunningServer]
