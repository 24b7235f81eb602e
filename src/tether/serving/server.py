"""``PolicyServer``: the gRPC edge assembled and running (service, batcher, health, metrics).

Owns the lifecycle: TLS and token files are read before anything binds (a bad path
fails startup with ``ServerSetupError``), the batcher starts before the port opens,
health reports SERVING only while a verified engine is loaded, and ``stop`` first
flips health to NOT_SERVING, then lets in-flight requests finish within the grace
period, then stops the batcher and the metrics endpoint.

Invariant: the server never answers with an action that did not pass a supervisor —
it cannot be constructed without a ``SupervisorFactory``, and every session and every
stateless request gets a supervisor from it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from collections.abc import Callable, Iterable, Sequence

import grpc
import numpy as np
import psutil
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from tether.data.step import AnsweredSteps
from tether.safety.levels import DegradationLevel
from tether.serving import event_loop, reply_kernel
from tether.serving.admission import Admission
from tether.serving.batcher import BatchStats, DynamicBatcher
from tether.serving.config import ServerConfig
from tether.serving.decoding import add_policy_service
from tether.serving.errors import ServerSetupError
from tether.serving.gateway import ActionGateway
from tether.serving.inference import ActionOutcome, ActionQuery, InferencePipeline
from tether.serving.kserve import INFERENCE_SERVICE, add_inference_service
from tether.serving.metrics import MetricsHttpServer, ServingMetrics
from tether.serving.openpi import OpenpiEndpoint
from tether.serving.ports import EXCLUSIVE_PORT, check_port_free
from tether.serving.security import (
    BearerTokenInterceptor,
    bearer_token,
    exposure_warning,
    server_credentials,
)
from tether.serving.served_spec import ServedSpec
from tether.serving.service import PolicyService
from tether.serving.supervision import SupervisorFactory
from tether.v1 import policy_pb2 as pb
from tether.versions.facade import PolicyVersions
from tether.versions.holder import LiveModel, ModelSource
from tether.versions.protocols import EngineLike

log = logging.getLogger(__name__)

_GAUGE_PERIOD_S = 0.05
POLICY_SERVICE = pb.DESCRIPTOR.services_by_name["PolicyService"].full_name


class PolicyServer:
    """One gRPC server serving one robot spec; see the module docstring."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        spec: ServedSpec,
        supervisors: SupervisorFactory,
        engine: EngineLike | None = None,
        record_steps: Callable[[AnsweredSteps], object] | None = None,
        end_session: Callable[[str], None] | None = None,
        after_reply: Callable[[], object] | None = None,
        before_batch: Callable[[], None] | None = None,
        cuda: bool = False,
        versions: PolicyVersions | None = None,
    ) -> None:
        self.config = config
        # With policy versions, requests find their engine there (pins to retired
        # versions, per-episode A/B split and canary), and every batch, step and episode
        # is reported back to the gate and the rollback monitor; without, the live holder
        # serves its one engine.
        self._versions = versions
        self.spec = spec
        self.models = LiveModel(engine)
        self.source: ModelSource = versions if versions is not None else self.models
        self._supervisors = supervisors
        self.metrics = ServingMetrics(spec.action_names, degradation=self._degradation_now)
        self.metrics.memory.set_function(lambda: float(psutil.Process().memory_info().rss))
        self.admission = Admission(
            config.admission, control_period_s=spec.control_period_s, cuda=cuda
        )
        self._pipeline = InferencePipeline(
            self.source,
            on_actions=self._observe_actions,
            versions=versions,
            step_period_s=spec.control_period_s,
            max_abs_observation=config.validation.max_abs_observation,
            record=record_steps,
        )
        self._end_session = end_session
        self._after_reply = after_reply
        self._before_batch = before_batch
        self._server: grpc.aio.Server | None = None
        self._batcher: DynamicBatcher[ActionQuery, ActionOutcome] | None = None
        self._health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        self._metrics_http: MetricsHttpServer | None = None
        self.port = 0
        self.metrics_port: int | None = None
        self.openpi_port: int | None = None  # set by start() when openpi.port is configured
        self._openpi: OpenpiEndpoint | None = None
        # Set by start(): plaintext off loopback, limits nothing checks; printed by the CLI.
        self.warnings: tuple[str, ...] = ()
        self._next_gauge_update = 0.0

    @property
    def address(self) -> str:
        return f"{self.config.host}:{self.port}"

    @property
    def batcher(self) -> DynamicBatcher[ActionQuery, ActionOutcome]:
        if self._batcher is None:
            raise ServerSetupError("the server is not started; await start() first")
        return self._batcher

    async def start(self) -> None:
        cfg = self.config
        check_port_free(cfg.host, cfg.port, "--port")
        if cfg.metrics_port is not None:
            check_port_free(cfg.metrics_host, cfg.metrics_port, "--metrics-port")
        credentials = server_credentials(cfg.security)
        token = bearer_token(cfg.security)
        exposure = exposure_warning(cfg.host, tls=credentials is not None, token=bool(token))
        self.warnings = tuple(w for w in (exposure, self._supervisors.unchecked) if w is not None)
        for warning in self.warnings:
            log.warning("%s", warning)
        # Compile the reply encoder (or load it from numba's cache) before the first batch.
        reply_kernel.warm()
        self._batcher = DynamicBatcher(
            self._pipeline.run,
            cfg.batcher,
            max_queued=cfg.admission.max_queued_requests,
            before_batch=self._before_batch,
            on_batch=self._observe_batch,
            busy_poll_s=cfg.busy_poll_us / 1e6,
        )
        # The batcher counts the streaming clients (it arms busy polling by them); the
        # gauge reads that count when scraped.
        batcher = self._batcher
        self.metrics.sessions.set_function(lambda: float(batcher.streams))
        server = grpc.aio.server(
            interceptors=[BearerTokenInterceptor(token)] if token else None,
            options=[
                ("grpc.max_receive_message_length", cfg.max_message_bytes),
                ("grpc.max_send_message_length", cfg.max_message_bytes),
                ("grpc.keepalive_time_ms", int(cfg.keepalive_time_s * 1000)),
                ("grpc.keepalive_permit_without_calls", 1),
                # Clients ping every few seconds to notice a dead link fast; allow it.
                ("grpc.http2.min_recv_ping_interval_without_data_ms", 1000),
                ("grpc.http2.max_pings_without_data", 0),
                *EXCLUSIVE_PORT,
            ],
        )
        service = PolicyService(
            config=cfg,
            spec=self.spec,
            models=self.source,
            batcher=self._batcher,
            admission=self.admission,
            metrics=self.metrics,
            supervisors=self._supervisors,
            end_session=self._end_session,
            after_reply=self._after_reply,
            safety_limits_json=json.dumps(self._supervisors.limits.to_dict(), sort_keys=True),
            versions=self._versions,
        )
        add_policy_service(service, server)
        # The drop-in protocols (KServe v2 here, openpi on its own port) share the batcher,
        # admission, supervisors and versions with tether.v1.
        gateway = ActionGateway(
            config=cfg,
            spec=self.spec,
            models=self.source,
            batcher=self._batcher,
            admission=self.admission,
            metrics=self.metrics,
            supervisors=self._supervisors,
        )
        services = [POLICY_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME]
        if cfg.kserve.enabled:
            add_inference_service(gateway, server)
            services.append(INFERENCE_SERVICE)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(services, server)
        address = f"{cfg.host}:{cfg.port}"
        try:
            if credentials is None:
                port = server.add_insecure_port(address)
            else:
                port = server.add_secure_port(address, credentials)
        except RuntimeError as exc:
            await self._batcher.close()
            raise ServerSetupError(
                f"cannot bind the gRPC server to {address}: {exc}; choose another --port"
            ) from exc
        if port == 0:
            await self._batcher.close()
            raise ServerSetupError(
                f"cannot bind the gRPC server to {address}: the port is in use or the host "
                "is not an address of this machine; choose another --port"
            )
        if cfg.metrics_port is not None:
            try:
                self._metrics_http = MetricsHttpServer(
                    self.metrics.registry, cfg.metrics_host, cfg.metrics_port
                )
            except ServerSetupError:
                await self._release(server)
                raise
            self.metrics_port = self._metrics_http.port
        if cfg.openpi.port is not None:
            self._openpi = OpenpiEndpoint(gateway)
            try:
                await self._openpi.start()
            except ServerSetupError:
                self._openpi = None
                await self._release(server)
                raise
            self.openpi_port = self._openpi.port
        self.port = port
        # Started last: a setup step that raises above leaves no worker task behind.
        self._batcher.start()
        await server.start()
        self._server = server
        await self._publish_health()
        log.info(
            "serving on %s:%d, event loop %s, busy polling %s",
            cfg.host,
            port,
            event_loop.loop_name(asyncio.get_running_loop()),
            f"{cfg.busy_poll_us:g} µs" if cfg.busy_poll_us > 0 else "off",
        )

    async def _release(self, server: grpc.aio.Server) -> None:
        """Undo a start that failed after the gRPC server was built."""
        await server.stop(None)
        await self.batcher.close()
        if self._metrics_http is not None:
            self._metrics_http.close()
            self._metrics_http = None

    async def set_engine(self, engine: EngineLike | None) -> None:
        """Serve ``engine`` from the next batch on (None: stop serving, health NOT_SERVING)."""
        self.models.replace(engine)
        await self._publish_health()

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop accepting, finish in-flight requests within the grace period, release ports."""
        grace = self.config.grace_s if grace_s is None else grace_s
        if self._server is not None:
            await self._health.enter_graceful_shutdown()
            await self._server.stop(grace)
            self._server = None
        if self._openpi is not None:
            await self._openpi.close()
            self._openpi = None
        if self._batcher is not None:
            await self._batcher.close()
        if self._metrics_http is not None:
            self._metrics_http.close()
            self._metrics_http = None

    async def wait_for_termination(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()

    async def _publish_health(self) -> None:
        engine = self.source.live_engine()
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if engine is not None
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        await self._health.set("", status)
        await self._health.set(POLICY_SERVICE, status)
        if engine is not None:
            self.metrics.live_version.set(engine.version.id)

    def _observe_batch(self, stats: BatchStats) -> None:
        if stats.size:
            self.metrics.batch_size.observe(stats.size)
            self.metrics.inference_seconds.observe(stats.compute_ns / 1e9)

    def _observe_actions(self, engine: EngineLike, actions: Sequence[np.ndarray]) -> None:
        """One batch's executed actions (one row each) into the gauges, at most every 50 ms."""
        # Gauges are scraped every few seconds; refreshing them on every batch cost ~70 µs
        # of the single-robot round trip (profiled), so they follow at most every 50 ms.
        now = time.monotonic()
        if now < self._next_gauge_update:
            return
        self._next_gauge_update = now + _GAUGE_PERIOD_S
        self.metrics.live_version.set(engine.version.id)
        self.metrics.actions(np.stack(actions), engine.action_low, engine.action_high)

    def _degradation_now(self) -> tuple[DegradationLevel, Iterable[DegradationLevel]]:
        """The learning-wide level and every robot's, for the metrics scrape."""
        machine = self._supervisors.degradation
        robots = machine.robot_levels().values() if machine is not None else ()
        return self._supervisors.level(), robots


async def run_until_signal(server: PolicyServer) -> None:
    """Serve until SIGTERM or SIGINT, then stop gracefully (the caller exits 0)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await server.stop()
