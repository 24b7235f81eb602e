"""``tether run --backend ray``: the same run, with its pieces placed as Ray actors.

The driver (this process) connects to Ray (a local instance sized to the machine, or
the cluster at ``ray.address``), creates the replay actor, the version service (a
named actor), the learner actor and one edge policy server per group of robots, then
starts the simulated robots exactly as the embedded backend does, each talking gRPC to
its edge. It turns what the actors note into the run's events, writes the same
snapshots, episodes and latencies into the same run directory, and builds the same
report. ``fleet.json`` (and the ``start`` event) say which backend ran and where each
actor was placed.

Invariants: everything it started it stops, robots first (no step after an edge's
recorder closed), then the edges (each flushes its recorder, log and shipper), then
the learner (its final checkpoint); a local Ray instance it started is shut down.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tether.assets import pretrained_bundle_path
from tether.fleet.edge import EdgePlan, EdgeServer, EdgeStatus
from tether.fleet.learner import LearnerActor, LearnerPlan, LearnerStatus
from tether.fleet.notes import ActorNote
from tether.fleet.placement import (
    EDGE_CPUS,
    ActorPlacement,
    free_port,
    learner_resources,
    local_cpus,
    on_node,
)
from tether.fleet.ray_support import require_ray
from tether.fleet.replay import ReplayService, ReplayStats
from tether.fleet.version_service import SERVICE_NAME, FleetVersions, VersionService
from tether.fleet.weights import decode_weights
from tether.learning.hindsight import bundle_for_learner
from tether.policy import PolicyBundle, load_bundle, save_derived_bundle
from tether.runtime.config import RunConfig
from tether.runtime.dashboard import dashboard_for
from tether.runtime.plans import robot_plans
from tether.runtime.records import (
    CONFIG_FILE,
    FINAL_BUNDLE_DIR,
    FLEET_FILE,
    RunEvent,
    RunJournal,
    SystemSnapshot,
    collect_latency,
)
from tether.runtime.report import build_report
from tether.runtime.robot import RobotPlan, RobotProcesses

log = logging.getLogger(__name__)

NAMESPACE = "tether"
_TICK_S = 0.1
_NOTES_EVERY_S = 0.5
_CALL_TIMEOUT_S = 10.0
_START_TIMEOUT_S = 180.0


class FleetSystem:
    """Builds, runs and stops the fleet; see the module docstring."""

    def __init__(self, config: RunConfig, run_dir: Path) -> None:
        self.config = config
        self.run_dir = run_dir
        # A learner that trains a goal shift starts from the same policy with a zero one.
        self.bundle_path = bundle_for_learner(
            config.bundle or pretrained_bundle_path(), config.learner, run_dir
        )
        self.bundle: PolicyBundle = load_bundle(self.bundle_path)
        if self.bundle.robot_spec is None:
            raise ValueError(
                f"bundle {self.bundle_path} records no robot spec; it cannot be supervised"
            )
        self.ray = require_ray()
        self._t0 = time.monotonic()
        self._t0_wall_ns = time.time_ns()
        self._stop = threading.Event()
        self._journal = RunJournal(run_dir)
        self._note_index: dict[str, int] = {}
        self._last_rejection = ""
        self._live_since = 0.0
        self._live_seen: int | None = None
        self._last_updates = (time.monotonic(), 0)
        self._updates_per_s = 0.0
        self._started_ray = False
        # One name per run: two runs on one cluster must not find each other's service.
        self.service_name = f"{SERVICE_NAME}-{run_dir.name}"
        self.edges: dict[str, Any] = {}
        self.edge_addresses: dict[str, str] = {}
        self.placements: list[ActorPlacement] = []
        self.interrupted_by: signal.Signals | None = None
        (run_dir / CONFIG_FILE).write_text(config.to_yaml(), encoding="utf-8")

    # ------------------------------------------------------------------ events

    def t_s(self) -> float:
        return time.monotonic() - self._t0

    def event(self, kind: str, message: str, **kw: Any) -> None:
        ev = RunEvent(t_s=self.t_s(), kind=kind, message=message, **kw)
        self._journal.event(ev)
        log.info("%s: %s", kind, message)

    def _note_event(self, source: str, note: ActorNote) -> None:
        t_s = (note.wall_ns - self._t0_wall_ns) / 1e9
        if note.kind == "rejection":
            self._last_rejection = note.message
        details = dict(note.details) | {"source": source}
        ev = RunEvent(
            t_s=t_s,
            kind=note.kind,
            message=note.message,
            version=note.version,
            robot_id=note.robot_id,
            details=details,
        )
        self._journal.event(ev)

    def _collect_notes(self, name: str, handle: Any) -> None:
        try:
            index, notes = self.ray.get(
                handle.notes_since.remote(self._note_index.get(name, 0)), timeout=_CALL_TIMEOUT_S
            )
        except Exception:  # a dead actor: its restart says so in its own notes
            return
        # A restarted actor numbers its notes from 0 again.
        if index < self._note_index.get(name, 0):
            index, notes = self.ray.get(handle.notes_since.remote(0), timeout=_CALL_TIMEOUT_S)
        self._note_index[name] = index
        for note in notes:
            self._note_event(name, note)

    def collect_notes(self) -> None:
        """Every actor's new notes become run events."""
        self._collect_notes("versions", self.service)
        self._collect_notes("learner", self.learner)
        for edge_id, edge in self.edges.items():
            self._collect_notes(edge_id, edge)

    # ------------------------------------------------------------------ building

    def connect(self) -> None:
        """Join the configured cluster, or start a local instance sized to this machine."""
        ray = self.ray
        address = self.config.ray.address
        if ray.is_initialized():
            return
        if address is None:
            # "local": a new instance even where `ray start` left one running (without an
            # address, ray.init would join that cluster, or the RAY_ADDRESS one, silently).
            ray.init(
                address="local",
                num_cpus=local_cpus(),
                include_dashboard=False,
                namespace=NAMESPACE,
                log_to_driver=False,
                configure_logging=False,
            )
            self._started_ray = True
        else:
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)

    def build(self) -> None:
        """Create the actors and wait until every edge serves."""
        ray = self.ray
        cfg = self.config
        rc = cfg.ray
        spec = self.bundle.robot_spec
        assert spec is not None
        here = ray.get_runtime_context().get_node_id()
        near = on_node(here)
        opts = {"max_restarts": rc.max_restarts, "max_task_retries": 0}
        replay_cls = ray.remote(ReplayService)
        # One call at a time: each edge's batches land in the order it sent them.
        self.replay = replay_cls.options(num_cpus=0, scheduling_strategy=near).remote(
            spec.obs_dim, spec.act_dim, rc.replay_capacity
        )
        service_cls = ray.remote(VersionService)
        self.service = service_cls.options(
            name=self.service_name,
            namespace=NAMESPACE,
            num_cpus=0,
            scheduling_strategy=near,
            max_concurrency=8,
        ).remote(self.bundle.version, gate_edge=self.gate_edge())
        self._initial = self.bundle.version.id
        learner_res = learner_resources(ray.cluster_resources(), rc.learner_gpus)
        learner_cls = ray.remote(LearnerActor)
        self.learner = learner_cls.options(**learner_res, **opts, max_concurrency=4).remote(
            self._learner_plan(), self.replay
        )
        edge_cls = ray.remote(EdgeServer)
        for i, robots in enumerate(self._edge_robot_counts()):
            edge_id = f"edge-{i}"
            plan = EdgePlan(
                edge_id=edge_id,
                bundle_path=str(self.bundle_path),
                run_config_json=cfg.model_dump_json(),
                run_dir=str(self.run_dir),
                host=rc.edge_host,
                port=cfg.server.port if cfg.server.port else free_port(rc.edge_host),
                robots=robots,
                gate=edge_id == self.gate_edge(),
                service_name=self.service_name,
                namespace=NAMESPACE,
            )
            self.edges[edge_id] = edge_cls.options(
                num_cpus=EDGE_CPUS, scheduling_strategy=near, max_concurrency=4, **opts
            ).remote(plan, self.replay)
        self.edge_addresses = {
            edge_id: address
            for edge_id, address in zip(
                self.edges,
                ray.get(
                    [e.address.remote() for e in self.edges.values()], timeout=_START_TIMEOUT_S
                ),
                strict=True,
            )
        }
        self._record_placement(learner_res)

    def _learner_plan(self) -> LearnerPlan:
        cfg = self.config
        return LearnerPlan(
            bundle_path=str(self.bundle_path),
            learner_config_json=cfg.learner.model_dump_json(),
            channel_config_json=cfg.channel.model_dump_json(),
            checkpoint_dir=str(self.run_dir / "learner"),
            verdict_dir=str(self.run_dir / "gate"),
            service_name=self.service_name,
            namespace=NAMESPACE,
            sync_interval_s=cfg.ray.sync_interval_s,
            torch_threads=cfg.learner.torch_threads or 1,
        )

    def _edge_robot_counts(self) -> list[int]:
        robots, edges = self.config.fleet.robots, self.config.ray.edges
        return [len(range(i, robots, edges)) for i in range(edges)]

    def gate_edge(self) -> str:
        """The edge that runs the gate's shadow and canary stages: the first learning
        robot's (a pinned baseline robot's episodes never go to a canary)."""
        fleet = self.config.fleet
        first_learning = 1 if fleet.baseline and fleet.robots > 1 else 0
        return self.edge_of(first_learning)

    def edge_of(self, robot_index: int) -> str:
        return f"edge-{robot_index % self.config.ray.edges}"

    def _record_placement(self, learner_res: dict[str, float]) -> None:
        ray = self.ray
        statuses: list[EdgeStatus] = ray.get(
            [e.status.remote() for e in self.edges.values()], timeout=_START_TIMEOUT_S
        )
        learner: LearnerStatus = ray.get(self.learner.status.remote(), timeout=_START_TIMEOUT_S)
        self.placements = [
            ActorPlacement(
                name=s.edge_id,
                role="edge",
                node_id=s.node_id,
                node_ip=s.node_ip,
                pid=s.pid,
                resources={"num_cpus": EDGE_CPUS},
                address=s.address,
            )
            for s in statuses
        ]
        self.placements.append(
            ActorPlacement(
                name="learner",
                role="learner",
                node_id=learner.node_id,
                node_ip=learner.node_ip,
                pid=learner.pid,
                resources=learner_res,
            )
        )
        for name, role, handle in (
            ("replay", "replay", self.replay),
            (self.service_name, "versions", self.service),
        ):
            node_id, node_ip, pid = ray.get(handle.location.remote(), timeout=_START_TIMEOUT_S)
            self.placements.append(
                ActorPlacement(
                    name=name, role=role, node_id=node_id, node_ip=node_ip, pid=pid, resources={}
                )
            )
        fleet = {
            "backend": "ray",
            "ray_address": self.config.ray.address or "local",
            "cluster_resources": ray.cluster_resources(),
            "actors": [asdict(p) for p in self.placements],
        }
        (self.run_dir / FLEET_FILE).write_text(json.dumps(fleet, indent=2), encoding="utf-8")

    def placement_text(self) -> str:
        """One line per actor: where it runs."""
        parts = []
        for p in self.placements:
            where = f"node {p.node_ip or p.node_id[:8]}"
            if p.address:
                where += f", gRPC {p.address}"
            if p.resources.get("num_gpus"):
                where += ", 1 GPU"
            parts.append(f"{p.name} on {where}")
        return "; ".join(parts)

    # ------------------------------------------------------------------ robots

    def robot_plans(self) -> list[RobotPlan]:
        return robot_plans(
            self.config,
            self.run_dir,
            pin_version=self._initial,
            address_of=lambda i: self.edge_addresses[self.edge_of(i)],
        )

    # ------------------------------------------------------------------ reads

    def fleet_versions(self) -> FleetVersions:
        result: FleetVersions = self.ray.get(self.service.fleet.remote(), timeout=_CALL_TIMEOUT_S)
        return result

    def edge_statuses(self) -> dict[str, EdgeStatus]:
        out: dict[str, EdgeStatus] = {}
        for edge_id, edge in self.edges.items():
            try:
                out[edge_id] = self.ray.get(edge.status.remote(), timeout=_CALL_TIMEOUT_S)
            except Exception:  # dead or restarting: absent from this snapshot
                continue
        return out

    def learner_status(self) -> LearnerStatus | None:
        try:
            status: LearnerStatus = self.ray.get(
                self.learner.status.remote(), timeout=_CALL_TIMEOUT_S
            )
        except Exception:
            return None
        return status

    def replay_stats(self) -> ReplayStats | None:
        try:
            stats: ReplayStats = self.ray.get(self.replay.stats.remote(), timeout=_CALL_TIMEOUT_S)
        except Exception:
            return None
        return stats

    def snapshot(self) -> SystemSnapshot:
        try:
            fleet: FleetVersions | None = self.fleet_versions()
        except Exception:
            fleet = None
        learner = self.learner_status()
        edges = self.edge_statuses()
        updates = learner.counters.updates if learner else self._last_updates[1]
        now = time.monotonic()
        then, before = self._last_updates
        if now - then >= 1.0:
            self._updates_per_s = max(0.0, (updates - before) / (now - then))
            self._last_updates = (now, updates)
        live = fleet.live_version if fleet and fleet.live_version is not None else self._initial
        if live != self._live_seen:
            self._live_seen, self._live_since = live, self.t_s()
        levels = [s.degradation_level for s in edges.values()]
        worst = max(levels, key=_LEVEL_ORDER.index) if levels else "NORMAL"
        log_dir = self.run_dir / "experience"
        log_bytes = sum(p.stat().st_size for p in log_dir.rglob("*") if p.is_file())
        return SystemSnapshot(
            t_s=self.t_s(),
            live_version=live,
            live_version_age_s=self.t_s() - self._live_since,
            degradation_level=worst,
            candidates_passed=fleet.candidates_passed if fleet else 0,
            candidates_rejected=fleet.candidates_rejected if fleet else 0,
            last_rejection=self._last_rejection,
            rollbacks=fleet.rollbacks if fleet else 0,
            learner_updates_per_s=self._updates_per_s,
            learner_updates_total=updates,
            replay_size=learner.counters.transitions if learner else 0,
            experience_log_bytes=log_bytes,
            robots=self._journal.robots(),
        )

    # ------------------------------------------------------------------ running

    def request_stop(self) -> None:
        self._stop.set()

    def _interrupt(self, sig: int, _frame: Any = None) -> None:
        if self.interrupted_by is None:
            self.interrupted_by = signal.Signals(sig)
            self.event(
                "interrupted",
                f"{self.interrupted_by.name} after {self.t_s():.1f} s; stopping and keeping "
                "everything so far",
                details={"signal": self.interrupted_by.name},
            )
        self.request_stop()

    def run(self) -> Path:
        """Run to the end of the duration (or a stop request); returns the report's path."""
        previous: dict[signal.Signals, Any] = {}
        try:
            self.connect()
            # After ray.init, which installs handlers of its own; only the main thread may
            # set them (tests run the system in a thread).
            if threading.current_thread() is threading.main_thread():
                for signum in (signal.SIGINT, signal.SIGTERM):
                    previous[signum] = signal.signal(signum, self._interrupt)
            self._main()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.close()
        return build_report(self.run_dir)

    def _main(self) -> None:
        robots: RobotProcesses | None = None
        try:
            self.build()
            robots = RobotProcesses(self.robot_plans())
            robots.start()
            deadline = time.monotonic() + _START_TIMEOUT_S
            while not self._stop.is_set() and not robots.all_ready():
                if not robots.all_alive():
                    raise RuntimeError("a robot process exited before its session opened")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"robots not connected after {_START_TIMEOUT_S:.0f} s")
                time.sleep(_TICK_S)
            self._t0 = time.monotonic()
            self._t0_wall_ns = time.time_ns()
            robots.go(self._t0)
            edges = ", ".join(f"{k} {v}" for k, v in self.edge_addresses.items())
            self.event(
                "start",
                f"serving {self.bundle_path} on Ray ({self.config.ray.address or 'local'}): "
                f"{len(robots.processes)} robots on {len(self.edges)} edges ({edges}); "
                f"placement: {self.placement_text()}",
                version=self._initial,
                details={
                    "backend": "ray",
                    "ray_address": self.config.ray.address or "local",
                    "placement": [asdict(p) for p in self.placements],
                },
            )
            self._watch(robots)
        finally:
            self._shutdown(robots)

    def _watch(self, robots: RobotProcesses) -> None:
        mode = self.config.dashboard
        last_snapshot = 0.0
        last_notes = 0.0
        with dashboard_for(mode) as dash:
            while not self._stop.is_set():
                time.sleep(_TICK_S)
                self._journal.take(robots.reports())
                if self.t_s() - last_notes >= _NOTES_EVERY_S:
                    last_notes = self.t_s()
                    self.collect_notes()
                over = self.t_s() >= self.config.duration_s
                if over and not robots.any_alive():
                    break
                if self.t_s() - last_snapshot >= self.config.snapshot_interval_s:
                    last_snapshot = self.t_s()
                    snap = self.snapshot()
                    self._journal.snapshots.append(snap)
                    dash.update(snap, tuple(self._journal.recent))

    def _shutdown(self, robots: RobotProcesses | None) -> None:
        if robots is not None:
            for _ in robots.winding_down():
                self._journal.take(robots.reports())
                time.sleep(_TICK_S)
            self._journal.take(robots.reports())
        if not self.edges:
            return
        self.collect_notes()
        self._journal.snapshots.append(self.snapshot())
        ray = self.ray
        finals: dict[str, Any] = {}
        for edge_id, edge in self.edges.items():
            try:
                finals[edge_id] = asdict(ray.get(edge.stop.remote(), timeout=60.0))
            except Exception as exc:
                finals[edge_id] = {"error": str(exc)}
        try:
            learner = asdict(ray.get(self.learner.stop.remote(), timeout=60.0))
        except Exception as exc:
            learner = {"error": str(exc)}
        self.collect_notes()
        replay = self.replay_stats()
        self._save_final_bundle()
        collect_latency(self.run_dir, [] if robots is None else robots.names())
        how = "finished" if self.interrupted_by is None else "interrupted"
        self.event(
            "stop",
            f"run {how} after {self.t_s():.1f} s",
            details={
                "backend": "ray",
                "edges": finals,
                "replay": None if replay is None else asdict(replay),
                "learner": learner,
                "interrupted_by": None if self.interrupted_by is None else self.interrupted_by.name,
            },
        )

    def _save_final_bundle(self) -> None:
        try:
            live = self.ray.get(self.service.live_weights.remote(), timeout=_CALL_TIMEOUT_S)
            if live is None:
                return
            if live.weights is None:
                state = self.bundle.actor_state
            else:
                state = decode_weights(self.ray.get(live.weights, timeout=_CALL_TIMEOUT_S))
        except Exception as exc:
            log.warning("final bundle not written: %s", exc)
            return
        save_derived_bundle(
            self.run_dir / FINAL_BUNDLE_DIR,
            self.bundle,
            actor_state=state,
            version_id=live.version.id,
            version_name=live.version.name,
        )

    def close(self) -> None:
        """Kill the actors (after their stop) and the local Ray instance this run started."""
        ray = self.ray
        if ray.is_initialized():
            for handle in [*self.edges.values(), getattr(self, "learner", None)]:
                if handle is not None:
                    with contextlib.suppress(Exception):
                        ray.kill(handle, no_restart=True)
            for name in ("service", "replay"):
                handle = getattr(self, name, None)
                if handle is not None:
                    with contextlib.suppress(Exception):
                        ray.kill(handle, no_restart=True)
            if self._started_ray:
                ray.shutdown()
        self._journal.close()


_LEVEL_ORDER = ["NORMAL", "RESTRICTED", "PAUSED", "TAKEOVER"]
