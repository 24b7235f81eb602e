"""The edge policy server: tether's own gRPC server for one group of robots, as a Ray actor.

:class:`EdgeServer` builds what the embedded ``tether run`` builds in its server
process — ``PolicyServer`` (validation, admission, batcher, engine), a supervisor per
session and this edge's own degradation machine, the recorder and an experience log —
and serves it on its own port. Robots talk gRPC to it directly; nothing of the control
loop crosses Ray. What does cross Ray, off the control path:

- transitions, from the recorder to the replay actor (:class:`ReplayShipper`);
- versions: a sync thread asks the version service what is live every
  ``sync_interval_s``, fetches a new version's weights from the object store once,
  builds its engine and makes it live in this edge's own registry — the swap happens at
  a batch boundary, as every swap in tether. The **gate edge** also receives the
  candidate under evaluation and runs the gate's shadow and canary stages on its robots
  (its :class:`~tether.versions.facade.PolicyVersions`, as in the embedded server); its
  verdict and any rollback go back to the service in the next sync.

If the version service is unreachable, nothing changes here: the edge keeps serving
its live version and counts the failed syncs. If this actor dies, Ray restarts it with
the same arguments: the same port (chosen by the driver), the bundle's version first,
then the fleet's live version on the first sync; the robots' clients reopen their
sessions (their watchdogs serve backup actions meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from tether.data.log import ExperienceLog
from tether.data.recorder import Recorder
from tether.data.step import AnsweredSteps
from tether.fleet.notes import ActorNote, NoteBook
from tether.fleet.shipper import ReplayShipper
from tether.fleet.version_service import GateReport, RollbackReport
from tether.fleet.weights import PublishedWeights, decode_weights
from tether.policy import PolicyBundle, PolicyEngine, load_bundle
from tether.runtime.config import RunConfig
from tether.safety.degradation import DegradationMachine
from tether.safety.for_spec import limits_for, supervisor_for
from tether.safety.levels import DegradationTransition
from tether.serving import event_loop
from tether.serving.bundle_check import for_robot
from tether.serving.config import ServerConfig
from tether.serving.launch import build_server
from tether.versions.errors import VersionError
from tether.versions.facade import PolicyVersions
from tether.versions.records import LiveChange, VersionRecord, VersionSource, VersionState
from tether.versions.rollback import CheckOutcome
from tether.versions.server_gate import GateOutcome

log = logging.getLogger(__name__)

_SYNC_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class EdgePlan:
    """What an edge needs, as plain values; Ray passes the same plan again on a restart."""

    edge_id: str
    bundle_path: str
    run_config_json: str
    run_dir: str
    host: str
    port: int  # fixed by the driver (never 0), so a restarted edge is where its robots look
    robots: int  # robots assigned to this edge (its control clock's divisor)
    gate: bool  # this edge runs the gate's shadow and canary stages
    service_name: str
    namespace: str


@dataclass(frozen=True)
class EdgeStatus:
    edge_id: str
    address: str
    serving_version: int | None
    steps_served: int
    degradation_level: str
    syncs: int
    sync_failures: int  # syncs that did not reach the version service
    swaps: int  # live versions this edge made live from the fleet
    restarted: bool  # this incarnation is a restart of the actor
    pid: int
    node_id: str
    node_ip: str
    recorder: dict[str, int]
    shipper: dict[str, int]


class EdgeServer:
    """See the module docstring. ``replay`` is the replay actor's handle."""

    def __init__(self, plan: EdgePlan, replay: Any) -> None:
        import ray

        self.plan = plan
        self.notes = NoteBook()
        self.config = RunConfig.model_validate_json(plan.run_config_json)
        ctx = ray.get_runtime_context()
        self.restarted = bool(ctx.was_current_actor_reconstructed)
        self.node_id = ctx.get_node_id()
        self.node_ip = cast(Any, ray).util.get_node_ip_address()
        bundle = load_bundle(plan.bundle_path)
        spec = bundle.robot_spec
        if spec is None:
            raise ValueError(f"bundle {plan.bundle_path} records no robot spec")
        self.bundle: PolicyBundle = bundle
        limits = limits_for(spec)
        run_dir = Path(plan.run_dir)
        cfg = self.config
        self._steps = 0
        self._degradation = DegradationMachine(cfg.degradation, limits=limits, clock=self.control_s)
        self._degradation.add_listener(self._on_degradation)
        self._log = ExperienceLog(
            run_dir / "experience" / plan.edge_id, spec.obs_dim, spec.act_dim, cfg.experience_log
        )
        ray_cfg = cfg.ray
        self._shipper = ReplayShipper(
            replay,
            edge_id=plan.edge_id,
            obs_dim=spec.obs_dim,
            act_dim=spec.act_dim,
            batch=ray_cfg.ship_batch,
            in_flight=ray_cfg.ship_in_flight,
            buffer=ray_cfg.edge_buffer,
        )
        self._recorder = Recorder([self._log, self._shipper], cfg.recorder)
        self._versions = PolicyVersions(
            cfg.versions,
            engine_factory=for_robot(self._engine_for_bundle, spec, bundle),
            shadow_supervisor=supervisor_for(spec, limits, supervision=cfg.server.supervision),
            degradation=self._degradation,
        )
        self._versions.add_live_listener(self._on_live_change)
        self._versions.promotion.add_listener(self._on_gate)
        self._versions.rollback.add_check_listener(self._on_rollback_check)
        self._versions.load(Path(plan.bundle_path), make_live=True)
        self._server = build_server(
            Path(plan.bundle_path),
            self._server_config(),
            engine_config=self.config.served_engine(self.bundle.architecture),
            degradation=self._degradation,
            limits=limits,
            record_steps=self._record_steps,
            end_session=self._recorder.end_session,
            after_reply=self._recorder.nudge,
            versions=self._versions,
        )
        self._versions.drive(self._server.models)
        self._reports: list[GateReport | RollbackReport] = []
        self._reports_lock = threading.Lock()
        self._gating: int | None = None
        self._applying = False  # this edge is applying the fleet's change (not reporting it)
        self._syncs = 0
        self._sync_failures = 0
        self._swaps = 0
        self._loop = event_loop.loop_factory(self._server.config.event_loop)()
        self._loop_thread = threading.Thread(
            target=self._loop.run_forever, name=f"{plan.edge_id}-grpc", daemon=True
        )
        self._loop_thread.start()
        asyncio.run_coroutine_threadsafe(self._server.start(), self._loop).result(60.0)
        self._stop = threading.Event()
        self._service: Any = None
        self._sync_thread = threading.Thread(
            target=self._sync_loop, name=f"{plan.edge_id}-sync", daemon=True
        )
        self._sync_thread.start()
        if self.restarted:
            self.notes.add(
                "edge_restart",
                f"{plan.edge_id} restarted by Ray on {self.node_ip} (pid {os.getpid()}); "
                f"serving again on {self.address()}",
                details={"edge": plan.edge_id, "pid": os.getpid()},
            )

    # ----------------------------------------------------------------- wiring

    def control_s(self) -> float:
        """This edge's control time: its steps served / its robots / the control rate."""
        fleet = self.config.fleet
        return self._steps / (max(1, self.plan.robots) * fleet.control_rate_hz)

    def _record_steps(self, steps: AnsweredSteps) -> bool:
        self._steps += len(steps)
        return self._recorder.record_steps(steps)

    def _server_config(self) -> ServerConfig:
        return self.config.served_server().model_copy(
            update={"host": self.plan.host, "port": self.plan.port, "metrics_port": None}
        )

    def _engine_for_bundle(self, bundle: PolicyBundle) -> PolicyEngine:
        return PolicyEngine(bundle, self.config.served_engine(bundle.architecture))

    def _engine_for(self, published: PublishedWeights) -> PolicyEngine:
        import ray

        payload = ray.get(published.weights, timeout=_SYNC_TIMEOUT_S)
        engine = PolicyEngine(self.bundle, self.config.served_engine(self.bundle.architecture))
        engine.swap_weights(published.version, decode_weights(payload))
        return engine

    # ----------------------------------------------------------------- listeners

    def _on_degradation(self, tr: DegradationTransition) -> None:
        self.notes.add(
            "degradation",
            f"{tr.robot_id}: {tr.from_level.name} -> {tr.to_level.name}: {tr.reason}",
            version=tr.policy_version,
            robot_id=tr.robot_id,
            details={
                "from": tr.from_level.name,
                "to": tr.to_level.name,
                "reason": tr.reason,
                "edge": self.plan.edge_id,
            },
        )

    def _on_rollback_check(self, check: CheckOutcome) -> None:
        details = {**check.details(), "edge": self.plan.edge_id}
        self.notes.add("rollback_check", check.describe(), version=check.live, details=details)

    def _on_live_change(self, change: LiveChange) -> None:
        if change.kind == "rollback" and not self._applying:
            previous = change.previous
            if previous is not None:
                self._report(
                    RollbackReport(self.plan.edge_id, previous.id, change.current.id, change.reason)
                )

    def _on_gate(self, outcome: GateOutcome) -> None:
        self._report(
            GateReport(outcome.version, outcome.promoted, outcome.describe(), outcome.verdicts)
        )

    def _report(self, report: GateReport | RollbackReport) -> None:
        with self._reports_lock:
            self._reports.append(report)

    # ----------------------------------------------------------------- sync

    def _sync_loop(self) -> None:
        interval = self.config.ray.sync_interval_s
        while not self._stop.wait(interval):
            try:
                self.sync_once()
            except Exception:  # the next round tries again; serving is untouched
                log.exception("%s: sync round failed", self.plan.edge_id)

    def _service_handle(self) -> Any:
        import ray

        if self._service is None:
            self._service = ray.get_actor(self.plan.service_name, namespace=self.plan.namespace)
        return self._service

    def sync_once(self) -> bool:
        """One round with the version service; False when it was unreachable."""
        import ray

        # What this edge serves is read before its reports are taken: a local verdict that
        # lands in between is then in these reports, so the view that comes back already
        # has it, and the edge never swaps back to the version it just left.
        live = self._versions.registry.live()
        with self._reports_lock:
            reports, self._reports = self._reports, []
        try:
            view = ray.get(
                self._service_handle().sync.remote(
                    self.plan.edge_id,
                    None if live is None else live.id,
                    int(self._degradation.level),
                    tuple(reports),
                ),
                timeout=_SYNC_TIMEOUT_S,
            )
        except Exception as exc:
            with self._reports_lock:  # kept for the next round, in order
                self._reports = reports + self._reports
            self._sync_failures += 1
            self._service = None  # look the named actor up again next time
            if self._sync_failures == 1 or self._sync_failures % 100 == 0:
                log.warning(
                    "%s: version service unreachable (%s); serving version %s unchanged",
                    self.plan.edge_id,
                    type(exc).__name__,
                    None if live is None else live.id,
                )
            return False
        self._syncs += 1
        if view.live is not None and (live is None or view.live.version.id != live.id):
            self._make_live(view.live)
        if (
            self.plan.gate
            and view.candidate is not None
            and view.candidate.version.id != self._gating
        ):
            self._gate(view.candidate)
        return True

    def _make_live(self, published: PublishedWeights) -> None:
        registry = self._versions.registry
        vid = published.version.id
        current = registry.live()
        if current is not None and current.id == vid:
            return  # this edge's own gate made it live first
        reason = f"fleet: the version service made version {vid} live"
        self._applying = True
        try:
            try:
                record = registry.get(vid)
            except VersionError:
                record = None
            if record is None:
                if published.weights is None:
                    log.error("%s: version %d has no weights to fetch", self.plan.edge_id, vid)
                    return
                engine = self._engine_for(published)
                registry.register(engine, source=VersionSource.LEARNER, make_live_if_first=False)
            elif record.state is VersionState.REJECTED:
                log.error(
                    "%s: the fleet made version %d live, which this edge rejected; "
                    "serving %s until the fleet moves on",
                    self.plan.edge_id,
                    vid,
                    registry.live(),
                )
                return
            registry.promote(vid, reason)
        except Exception:
            log.exception("%s: could not make version %d live", self.plan.edge_id, vid)
            return
        finally:
            self._applying = False
        self._swaps += 1

    def _gate(self, published: PublishedWeights) -> None:
        self._gating = published.version.id
        try:
            try:
                self._versions.registry.get(published.version.id)
                return  # already known here (e.g. it went live before this sync)
            except VersionError:
                pass
            engine = self._engine_for(published)
            self._versions.submit_candidate(
                engine,
                published.prior,
                source=VersionSource.LEARNER,
                promote_directly=published.promote_directly,
            )
        except Exception as exc:
            log.exception("%s: could not gate version %d", self.plan.edge_id, self._gating)
            self._report(
                GateReport(published.version.id, False, f"refused at the gate edge: {exc}")
            )

    # ----------------------------------------------------------------- calls

    def address(self) -> str:
        return self._server.address

    def serving_version(self) -> int | None:
        live = self._versions.registry.live()
        return None if live is None else live.id

    def status(self) -> EdgeStatus:
        rec = self._recorder.stats()
        return EdgeStatus(
            edge_id=self.plan.edge_id,
            address=self.address(),
            serving_version=self.serving_version(),
            steps_served=self._steps,
            degradation_level=self._degradation.level.name,
            syncs=self._syncs,
            sync_failures=self._sync_failures,
            swaps=self._swaps,
            restarted=self.restarted,
            pid=os.getpid(),
            node_id=self.node_id,
            node_ip=self.node_ip,
            recorder=asdict(rec.pairing) | rec.losses(),
            shipper=asdict(self._shipper.stats()),
        )

    def versions(self) -> tuple[VersionRecord, ...]:
        """This edge's own registry: every version it knows and its state here."""
        return self._versions.registry.records()

    def notes_since(self, index: int) -> tuple[int, list[ActorNote]]:
        return self.notes.since(index)

    def stop(self) -> EdgeStatus:
        """Stop serving, flush the recorder, the log and the shipper; the final status."""
        self._stop.set()
        self._sync_thread.join(5.0)
        grace = self.config.server.grace_s
        asyncio.run_coroutine_threadsafe(self._server.stop(), self._loop).result(grace + 10.0)
        self._versions.close()
        self._recorder.close()
        self._log.close()
        self._shipper.close()
        status = self.status()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(5.0)
        return status

    def pid(self) -> int:
        return os.getpid()
