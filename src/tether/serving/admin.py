"""AdminService: operators list, load, split, promote, roll back, resume and reload.

A thin gRPC layer over the registry (:mod:`tether.versions.registry`), the router
(:mod:`tether.versions.routing`), the server-side gate (:mod:`tether.versions.server_gate`),
the model directory (:mod:`tether.versions.model_dir`) and the safety
``DegradationMachine``. Authentication and roles are checked before a handler runs
(:mod:`tether.serving.admin_auth`); the operator's name recorded in reasons and in the
TAKEOVER resume comes from the same token.

Invariants: every failure is a status code with a message that says what to do (a
``TetherError`` carries its code; bundle faults are INVALID_ARGUMENT); loading bundles
and reloading the directory run in a worker thread, so serving never waits for them; a
candidate promoted without ``skip_gate`` enters the gate instead of going live.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import grpc

from tether.errors import TetherError
from tether.policy.errors import BundleError
from tether.safety.degradation import DegradationMachine
from tether.safety.errors import SafetyError
from tether.serving.admin_auth import AdminAuth, AdminAuthInterceptor, AdminIdentity
from tether.serving.convert import degradation_to_proto
from tether.serving.errors import ServerSetupError, ServingError, status_code
from tether.serving.ports import EXCLUSIVE_PORT, check_port_free
from tether.v1 import admin_pb2 as apb, admin_pb2_grpc as apb_grpc
from tether.versions.errors import VersionError
from tether.versions.facade import PolicyVersions
from tether.versions.model_dir import EngineFactory, load_into, reload_model_dir
from tether.versions.records import VersionRecord, VersionState
from tether.versions.registry import ModelRegistry
from tether.versions.routing import TrafficRouter
from tether.versions.server_gate import ServerGate

T = TypeVar("T")
Context = grpc.aio.ServicerContext[Any, Any]

_STATES = {
    VersionState.CANDIDATE: apb.VERSION_STATE_CANDIDATE,
    VersionState.SHADOW: apb.VERSION_STATE_SHADOW,
    VersionState.CANARY: apb.VERSION_STATE_CANARY,
    VersionState.LIVE: apb.VERSION_STATE_LIVE,
    VersionState.RETIRED: apb.VERSION_STATE_RETIRED,
    VersionState.REJECTED: apb.VERSION_STATE_REJECTED,
}


class AdminServicer(apb_grpc.AdminServiceServicer):
    """See the module docstring; construct once per server and add it with :meth:`add_to`."""

    def __init__(
        self,
        *,
        registry: ModelRegistry[Any],
        router: TrafficRouter,
        auth: AdminAuth,
        engine_factory: EngineFactory,
        model_dir: Path | None = None,
        reload_makes_live: bool = False,
        promotion: ServerGate | None = None,
        degradation: DegradationMachine | None = None,
    ) -> None:
        self._registry = registry
        self._router = router
        self._auth = auth
        self._engine_factory = engine_factory
        self._model_dir = model_dir
        self._reload_makes_live = reload_makes_live
        self._promotion = promotion
        self._degradation = degradation

    def add_to(self, server: grpc.aio.Server) -> None:
        apb_grpc.add_AdminServiceServicer_to_server(self, server)  # type: ignore[no-untyped-call]

    # ----------------------------------------------------------------- reads

    async def ListVersions(
        self, request: apb.ListVersionsRequest, context: Context
    ) -> apb.ListVersionsResponse:
        live, lkg = self._registry.live(), self._registry.last_known_good()
        weights = dict(self._router.split().weights)
        canary = self._router.canary()
        reply = apb.ListVersionsResponse(
            versions=[
                self._entry(r, weights.get(r.id, 0.0), lkg) for r in self._registry.records()
            ],
            traffic=[apb.TrafficWeight(version=v, weight=w) for v, w in weights.items()],
            canary_fraction=0.0 if canary is None else canary.fraction,
        )
        if live is not None:
            reply.live_version = live.id
        if lkg is not None:
            reply.last_known_good = lkg.id
        if canary is not None:
            reply.canary_version = canary.version
        check = self._router.check()
        if check is not None:
            reply.check_version = check.version
            reply.check_fraction = check.fraction
        return reply

    # ----------------------------------------------------------------- changes

    async def LoadBundle(
        self, request: apb.LoadBundleRequest, context: Context
    ) -> apb.LoadBundleResponse:
        if not request.path:
            await _abort(
                context, grpc.StatusCode.INVALID_ARGUMENT, "path is empty; give a bundle directory"
            )
        record = await _run(
            context,
            asyncio.to_thread(
                load_into,
                self._registry,
                Path(request.path),
                self._engine_factory,
                make_live=request.make_live,
            ),
        )
        return apb.LoadBundleResponse(version=self._entry_of(record.id))

    async def Unload(self, request: apb.UnloadRequest, context: Context) -> apb.UnloadResponse:
        record = await _run(context, _now(self._registry.unload, request.version))
        return apb.UnloadResponse(version=self._entry_of(record.id))

    async def SetTraffic(
        self, request: apb.SetTrafficRequest, context: Context
    ) -> apb.SetTrafficResponse:
        weights: dict[int, float] = {}
        for w in request.weights:
            if w.version in weights:
                await _abort(
                    context,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"version {w.version} appears twice in weights; give each version once",
                )
            weights[w.version] = w.weight
        split = await _run(context, _now(self._router.set_split, weights))
        return apb.SetTrafficResponse(
            weights=[apb.TrafficWeight(version=v, weight=x) for v, x in split.weights]
        )

    async def Promote(self, request: apb.PromoteRequest, context: Context) -> apb.PromoteResponse:
        who = self._who(context)
        reason = f"operator {who.name}: {request.reason or 'promote'}"
        record = await _run(context, _now(self._registry.get, request.version))
        gated = record.state in (VersionState.CANDIDATE, VersionState.SHADOW)
        if gated and not request.skip_gate:
            if self._promotion is None:
                await _abort(
                    context,
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"version {record.id} is a {record.state.value} and this server runs no "
                    "gate; pass skip_gate to make it live on your authority",
                )
            if record.state is VersionState.CANDIDATE:
                promotion = self._promotion
                assert promotion is not None
                await _run(context, _now(promotion.submit, record.id))
        else:
            if gated:
                reason += " (gate skipped by the operator)"
            await _run(context, _now(self._registry.promote, record.id, reason))
        return apb.PromoteResponse(version=self._entry_of(record.id))

    async def Rollback(
        self, request: apb.RollbackRequest, context: Context
    ) -> apb.RollbackResponse:
        who = self._who(context)
        change = await _run(
            context,
            _now(self._registry.rollback, f"operator {who.name}: {request.reason or 'rollback'}"),
        )
        assert change.previous is not None  # a rollback always has a version it left
        return apb.RollbackResponse(
            live=self._entry_of(change.current.id), rolled_back=change.previous.id
        )

    async def Resume(self, request: apb.ResumeRequest, context: Context) -> apb.ResumeResponse:
        who = self._who(context)
        if self._degradation is None:
            await _abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                "this server has no degradation machine, so there is no TAKEOVER to leave",
            )
        machine = self._degradation
        assert machine is not None
        transition = await _run(
            context,
            _now(machine.resume, operator=who.name, reason=request.reason or "operator resume"),
        )
        return apb.ResumeResponse(
            level=degradation_to_proto(int(transition.to_level)), operator=who.name
        )

    async def Reload(self, request: apb.ReloadRequest, context: Context) -> apb.ReloadResponse:
        if self._model_dir is None:
            await _abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                "this server was started without a model directory; start it with one, or "
                "use LoadBundle",
            )
        result = await _run(context, asyncio.to_thread(self.reload))
        return apb.ReloadResponse(
            loaded=[self._entry_of(r.id) for r in result.loaded],
            unchanged=[str(p) for p in result.unchanged],
            failed=[apb.ReloadFailure(path=str(p), reason=why) for p, why in result.failed],
        )

    def reload(self) -> Any:
        """Re-read the model directory (what Reload and SIGHUP run, in a worker thread)."""
        assert self._model_dir is not None
        return reload_model_dir(
            self._registry,
            self._model_dir,
            self._engine_factory,
            make_live=self._reload_makes_live,
        )

    # ----------------------------------------------------------------- helpers

    def _who(self, context: Context) -> AdminIdentity:
        identity = self._auth.identify(context.invocation_metadata())
        assert identity is not None  # the interceptor let the call through
        return identity

    def _entry_of(self, version_id: int) -> apb.VersionEntry:
        weights = dict(self._router.split().weights)
        return self._entry(
            self._registry.get(version_id),
            weights.get(version_id, 0.0),
            self._registry.last_known_good(),
        )

    def _entry(
        self, r: VersionRecord, weight: float, lkg: VersionRecord | None
    ) -> apb.VersionEntry:
        m = self._registry.metrics(r.id)
        entry = apb.VersionEntry(
            id=r.id,
            name=r.name,
            weights_sha256=r.weights_sha256,
            source=r.source.value,
            created_at_s=r.created_at_s,
            state=_STATES[r.state],
            reason=r.reason,
            loaded=r.loaded,
            declared_id=r.declared_id,
            bundle_path="" if r.bundle_path is None else str(r.bundle_path),
            metrics=apb.VersionMetrics(
                steps=m.steps,
                interventions=m.interventions,
                backups=m.backups,
                interventions_by_check=[
                    apb.CheckCount(check=c, count=n) for c, n in m.interventions_by_check
                ],
                episodes=m.episodes,
                mean_return=m.mean_return,
                success_rate=m.success_rate,
            ),
            traffic_weight=weight,
            last_known_good=lkg is not None and lkg.id == r.id,
        )
        if r.parent is not None:
            entry.parent = r.parent
        return entry


async def _now(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a quick, non-blocking registry call as an awaitable (for :func:`_run`)."""
    return fn(*args, **kwargs)


async def _run(context: Context, work: Any) -> Any:
    """Await ``work``; our own errors become status codes that say what to do."""
    try:
        return await work
    except BundleError as exc:
        await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    except (ServingError, VersionError) as exc:
        await _abort(context, status_code(exc), str(exc))
    except SafetyError as exc:
        await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))
    except TetherError as exc:
        await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))


async def _abort(context: Context, code: grpc.StatusCode, message: str) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("context.abort returned")  # grpc raises; this keeps typing honest


async def start_admin_server(
    servicer: AdminServicer,
    auth: AdminAuth,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    credentials: grpc.ServerCredentials | None = None,
) -> tuple[grpc.aio.Server, int]:
    """AdminService alone on its own port (TLS when ``credentials`` is given).

    A separate port keeps operator access apart from robot traffic (firewall it to the
    operators' network); the PolicyService server may instead add the servicer and
    :class:`~tether.serving.admin_auth.AdminAuthInterceptor` to itself.
    """
    check_port_free(host, port, "--admin-port")
    server = grpc.aio.server(interceptors=[AdminAuthInterceptor(auth)], options=EXCLUSIVE_PORT)
    servicer.add_to(server)
    address = f"{host}:{port}"
    bound = (
        server.add_insecure_port(address)
        if credentials is None
        else server.add_secure_port(address, credentials)
    )
    if bound == 0:
        raise ServerSetupError(
            f"cannot bind AdminService to {address}: the port is in use or the host is not "
            "an address of this machine; choose another --admin-port"
        )
    await server.start()
    return server, bound


def admin_servicer(versions: PolicyVersions, auth: AdminAuth | None = None) -> AdminServicer | None:
    """The AdminService over ``versions``, or None when no token file is configured."""
    if auth is None:
        if versions.config.admin_tokens_file is None:
            return None
        auth = AdminAuth.from_file(versions.config.admin_tokens_file)
    return AdminServicer(
        registry=versions.registry,
        router=versions.router,
        auth=auth,
        engine_factory=versions.engine_factory,
        model_dir=versions.config.model_dir,
        reload_makes_live=versions.config.reload_makes_live,
        promotion=versions.promotion,
        degradation=versions.degradation,
    )
