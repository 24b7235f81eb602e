"""``tether run``: the whole online-learning system on one machine, wired from the layers.

One server process (this one) hosts the gRPC edge, the supervisor and degradation
machine, the recorder, the experience log and the model registry with its gate and
rollback monitor. The learner is its own process on its own cores; transitions reach
it through a shared-memory channel and its candidates come back through shared
weights. Each simulated robot is its own process talking gRPC, exactly like a robot
controller would.

Invariants this module keeps: everything it started it stops, in an order that loses
nothing (robots first, so no step arrives after the recorder closed; the recorder
before the log; the learner after its last transitions); a candidate reaches the
registry only as a *candidate* (the gate decides, unless the learner's configuration
asked for the clearly-labelled unsafe direct promotion).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tether.assets import pretrained_bundle_path
from tether.data.channel import TransitionChannel
from tether.data.log import ExperienceLog
from tether.data.recorder import Recorder
from tether.data.step import AnsweredSteps
from tether.learning.hindsight import bundle_for_learner
from tether.learning.learner import LearnerCounters
from tether.learning.placement import learner_placement
from tether.learning.process import LearnerEvent, LearnerEventKind, LearnerProcess
from tether.policy import PolicyBundle, PolicyEngine, load_bundle, save_derived_bundle
from tether.policy.shared_weights import SharedWeights, WeightsSnapshot
from tether.runtime.config import RunConfig
from tether.runtime.dashboard import dashboard_for
from tether.runtime.leftovers import forget_processes, record_processes, stop_leftovers
from tether.runtime.plans import robot_plans
from tether.runtime.records import (
    CONFIG_FILE,
    EXPERIENCE_DIR,
    FINAL_BUNDLE_DIR,
    RunEvent,
    RunJournal,
    SystemSnapshot,
    collect_latency,
)
from tether.runtime.report import build_report
from tether.runtime.robot import RobotPlan, RobotProcesses
from tether.safety.degradation import DegradationMachine
from tether.safety.for_spec import limits_for, supervisor_for
from tether.safety.levels import DegradationTransition
from tether.serving import event_loop
from tether.serving.admin import admin_servicer, start_admin_server
from tether.serving.admin_auth import AdminAuth
from tether.serving.bundle_check import for_robot
from tether.serving.launch import build_server, freeze_startup_heap
from tether.serving.security import server_credentials
from tether.serving.server import PolicyServer
from tether.versions.facade import PolicyVersions
from tether.versions.intake import (
    CandidateIntake,
    CandidateRefused,
    CandidateSubmitted,
    IntakeEvent,
)
from tether.versions.records import LiveChange
from tether.versions.rollback import CheckOutcome
from tether.versions.server_gate import GateOutcome

log = logging.getLogger(__name__)

_TICK_S = 0.1
# Longest wait for the learner process to build its networks before the robots start (s).
_LEARNER_START_S = 60.0
_CANDIDATE_POLL_S = 0.2


def new_run_dir(out_dir: Path) -> Path:
    """``out_dir/<UTC timestamp>``, made fresh (a suffix keeps two runs in one second apart)."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    for i in range(100):
        path = out_dir / (stamp if i == 0 else f"{stamp}-{i}")
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"could not make a fresh run directory under {out_dir}")


class RunSystem:
    """Builds, runs and stops the whole system; see the module docstring."""

    def __init__(self, config: RunConfig, run_dir: Path) -> None:
        self.config = config
        self.run_dir = run_dir
        # A learner that trains a goal shift starts from the same policy with a zero one.
        self.bundle_path = bundle_for_learner(
            config.bundle or pretrained_bundle_path(), config.learner, run_dir
        )
        self.bundle: PolicyBundle = load_bundle(self.bundle_path)
        spec = self.bundle.robot_spec
        if spec is None:
            raise ValueError(
                f"bundle {self.bundle_path} records no robot spec; it cannot be supervised"
            )
        self.spec = spec
        self.limits = limits_for(spec)
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._journal = RunJournal(run_dir)
        self._passed = 0
        self._rejected = 0
        self._last_rejection = ""
        self._rollbacks = 0
        self._live_since = 0.0
        self._last_updates = (time.monotonic(), 0)
        self._updates_per_s = 0.0
        self._steps_served = 0
        self.interrupted_by: signal.Signals | None = None
        (run_dir / CONFIG_FILE).write_text(config.to_yaml(), encoding="utf-8")

    # ------------------------------------------------------------------ events

    def t_s(self) -> float:
        return time.monotonic() - self._t0

    def event(self, kind: str, message: str, **kw: Any) -> None:
        ev = RunEvent(t_s=self.t_s(), kind=kind, message=message, control_s=self.control_s(), **kw)
        self._journal.event(ev)
        log.info("%s: %s", kind, message)

    def _on_degradation(self, tr: DegradationTransition) -> None:
        """One robot's level moved: logged, and recorded as a ``degradation`` event."""
        self.event(
            "degradation",
            f"{tr.robot_id}: {tr.from_level.name} -> {tr.to_level.name}: {tr.reason}",
            version=tr.policy_version,
            robot_id=tr.robot_id,
            details={
                "from": tr.from_level.name,
                "to": tr.to_level.name,
                "reason": tr.reason,
            },
        )

    def _on_learning_level(self, tr: DegradationTransition) -> None:
        """The learning-wide level moved (the robots' aggregate): the learner obeys it."""
        self._weights.set_degradation_level(int(tr.to_level))
        self.event(
            "learning_level",
            f"{tr.from_level.name} -> {tr.to_level.name}: {tr.reason}",
            version=tr.policy_version,
            details={"from": tr.from_level.name, "to": tr.to_level.name, "reason": tr.reason},
        )

    def _on_live_change(self, change: LiveChange) -> None:
        self._live_since = self.t_s()
        if change.kind == "promotion":
            self._passed += 1
            stages = self._versions.promotion.verdicts(change.current.id)
            self.event(
                "promotion",
                change.reason,
                version=change.current.id,
                details={"stages_passed": [v.stage.value for v in stages if v.passed]},
            )
        elif change.kind == "rollback":
            # One place for every rollback, automatic (the monitor's reason carries its
            # numbers) or an operator's.
            self._rollbacks += 1
            self.event(
                "rollback",
                change.reason,
                version=change.current.id,
                details={
                    "stage": "rollback",
                    "from_version": None if change.previous is None else change.previous.id,
                },
            )

    def _on_gate(self, outcome: GateOutcome) -> None:
        if outcome.promoted:  # counted and logged by _on_live_change
            return
        self._rejected += 1
        last = outcome.verdicts[-1] if outcome.verdicts else None
        self._last_rejection = outcome.describe()
        details: dict[str, Any] = {"stage": last.stage if last else "unknown"}
        if last is not None:
            details.update({m.name: m.value for m in last.measurements})
        self.event("rejection", outcome.describe(), version=outcome.version, details=details)

    def _on_rollback_check(self, check: CheckOutcome) -> None:
        """The rollback monitor served the last-known-good beside live and decided."""
        self.event("rollback_check", check.describe(), version=check.live, details=check.details())

    def _on_learner(self, ev: LearnerEvent) -> None:
        kind = {
            LearnerEventKind.CRASHED: "learner_crash",
            LearnerEventKind.RESTARTED: "learner_restart",
            LearnerEventKind.GAVE_UP: "learner_crash",
        }.get(ev.kind)
        if kind is not None:
            self.event(kind, ev.message, details={"exitcode": ev.exitcode})

    # ------------------------------------------------------------------ building

    def _build(self) -> None:
        cfg = self.config
        spec = self.spec
        self._verdict_dir = self.run_dir / "gate"
        self._steps_served = 0
        self._degradation = DegradationMachine(
            cfg.degradation, limits=self.limits, clock=self.control_s
        )
        self._log = ExperienceLog(
            self.run_dir / EXPERIENCE_DIR, spec.obs_dim, spec.act_dim, cfg.experience_log
        )
        self._channel = TransitionChannel(spec.obs_dim, spec.act_dim, cfg.channel)
        self._recorder = Recorder([self._log, self._channel], cfg.recorder)
        self._weights = SharedWeights.create(self.bundle.manifest.architecture)
        self._degradation.add_listener(self._on_degradation)
        self._degradation.add_fleet_listener(self._on_learning_level)
        self._learner = LearnerProcess(
            self.bundle_path,
            cfg.learner,
            weights=self._weights,
            channel=self._channel,
            checkpoint_dir=self.run_dir / "learner",
            verdict_dir=self._verdict_dir,
            on_event=self._on_learner,
        )
        # The learner's cores were chosen above, from this process's full affinity; the
        # server (and the robots it spawns) keep the others, so learning never competes
        # with inference for a core (design invariant 3).
        serving = learner_placement().serving_cores
        if set(serving) != set(self._learner.cores):
            os.sched_setaffinity(0, serving)
        shadow = supervisor_for(spec, self.limits, supervision=cfg.server.supervision)
        self._versions = PolicyVersions(
            cfg.versions,
            engine_factory=for_robot(self._engine_for_bundle, spec, self.bundle),
            shadow_supervisor=shadow,
            degradation=self._degradation,
        )
        # Registered first: the learner hears of a live change before the run logs it.
        self._intake = CandidateIntake(
            self._versions,
            self._weights,
            verdict_dir=self._verdict_dir,
            build_engine=self._engine_for_snapshot,
            on_event=self._on_intake,
        )
        self._versions.add_live_listener(self._on_live_change)
        self._versions.promotion.add_listener(self._on_gate)
        self._versions.rollback.add_check_listener(self._on_rollback_check)
        initial = self._versions.load(self.bundle_path, make_live=True)
        self._initial = initial.id
        self._weights.set_live_version(initial.id)
        self._server: PolicyServer = build_server(
            self.bundle_path,
            self.config.served_server(),
            engine_config=self.config.served_engine(self.bundle.architecture),
            degradation=self._degradation,
            limits=self.limits,
            record_steps=self._record_steps,
            end_session=self._recorder.end_session,
            after_reply=self._recorder.nudge,
            versions=self._versions,
        )
        self._versions.drive(self._server.models)  # health and Describe follow the live version

    def control_s(self) -> float:
        """The robots' control time: steps served / robots / control rate.

        Every window of the system runs on it (the degradation machine's windows and quiet
        periods), so they mean the same number of control steps whether the robots run in
        real time or unthrottled (``fast``), and start-up, before the robots step, takes none.
        """
        fleet = self.config.fleet
        return self._steps_served / (fleet.robots * fleet.control_rate_hz)

    def _record_steps(self, steps: AnsweredSteps) -> bool:
        self._steps_served += len(steps)
        return self._recorder.record_steps(steps)

    def _engine_for_bundle(self, bundle: PolicyBundle) -> PolicyEngine:
        return PolicyEngine(bundle, self.config.served_engine(bundle.architecture))

    # ------------------------------------------------------------------ candidates

    def _intake_candidates(self) -> None:
        """Thread: learner publications become registry candidates (``CandidateIntake``)."""
        self._intake.run(self._stop, _CANDIDATE_POLL_S)

    def _engine_for_snapshot(self, snap: WeightsSnapshot) -> PolicyEngine:
        engine = PolicyEngine(self.bundle, self.config.served_engine(self.bundle.architecture))
        engine.swap_weights(snap.version_info(), snap.state)
        return engine

    def _on_intake(self, event: IntakeEvent) -> None:
        if isinstance(event, CandidateSubmitted):
            prior = [v.stage.value for v in event.prior]
            self.event(
                "candidate",
                f"learner published version {event.record.id} (parent {event.parent}); "
                f"learner-side stages passed: {prior}",
                version=event.record.id,
                details={"parent": event.parent, "prior_stages": prior},
            )
        elif isinstance(event, CandidateRefused):
            self._rejected += 1
            self.event(
                "rejection",
                f"candidate {event.learner_version} refused at intake: {event.reason}",
                version=event.learner_version,
                details={"stage": "intake"},
            )
        else:
            record = event.record
            last = record.verdicts[-1] if record.verdicts else None
            self._rejected += 1
            self._last_rejection = last.describe() if last else f"version {record.version} rejected"
            details: dict[str, Any] = {"stage": last.stage.value if last else "learner"}
            if last is not None:
                details.update({m.name: m.value for m in last.measurements})
            self.event("rejection", self._last_rejection, version=record.version, details=details)

    # ------------------------------------------------------------------ robots

    def _robot_plans(self, address: str) -> list[RobotPlan]:
        return robot_plans(
            self.config, self.run_dir, pin_version=self._initial, address_of=lambda _: address
        )

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> SystemSnapshot:
        counters: LearnerCounters = self._learner.counters()
        now = time.monotonic()
        then, updates = self._last_updates
        if now - then >= 1.0:
            self._updates_per_s = (counters.updates - updates) / (now - then)
            self._last_updates = (now, counters.updates)
        live = self._versions.live_engine()
        canary = self._versions.router.canary()
        check = self._versions.router.check()
        log_dir = self.run_dir / EXPERIENCE_DIR
        log_bytes = sum(p.stat().st_size for p in log_dir.glob("*") if p.is_file())
        return SystemSnapshot(
            t_s=self.t_s(),
            live_version=live.version.id if live is not None else 0,
            live_version_age_s=self.t_s() - self._live_since,
            degradation_level=self._degradation.level.name,
            candidates_passed=self._passed,
            candidates_rejected=self._rejected,
            last_rejection=self._last_rejection,
            rollbacks=self._rollbacks,
            learner_updates_per_s=self._updates_per_s,
            learner_updates_total=counters.updates,
            replay_size=counters.transitions,
            experience_log_bytes=log_bytes,
            robots=self._journal.robots(),
            canary_version=None if canary is None else canary.version,
            check_version=None if check is None else check.version,
        )

    # ------------------------------------------------------------------ running

    def request_stop(self) -> None:
        self._stop.set()

    def _interrupt(self, sig: signal.Signals) -> None:
        """SIGINT/SIGTERM: stop everything cleanly and say that the run was interrupted."""
        if self.interrupted_by is None:
            self.interrupted_by = sig
            # Before anything else: a child that the same Ctrl-C reached is being stopped,
            # not crashing, and must not be restarted.
            self._learner.prepare_stop()
            self.event(
                "interrupted",
                f"{sig.name} after {self.t_s():.1f} s; stopping and keeping everything so far",
                details={"signal": sig.name},
            )
        self.request_stop()

    def run(self) -> Path:
        """Run to the end of the duration (or a stop request); returns the report's path."""
        stopped = stop_leftovers(self.run_dir.parent)
        if stopped:
            log.warning("stopped %d processes an earlier run left running", len(stopped))
        try:
            event_loop.run(self._main(), self.config.served_server().event_loop)
        finally:
            forget_processes(self.run_dir)
        return build_report(self.run_dir)

    async def _main(self) -> None:
        try:
            self._build()
        except BaseException:
            self._close_partial()
            raise
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._interrupt, sig)
        robots: RobotProcesses | None = None
        self._admin: Any = None
        intake = threading.Thread(
            target=self._intake_candidates, name="candidate-intake", daemon=True
        )
        try:
            # Whatever fails part-way, the finally below stops what had started.
            await self._server.start()
            await self._start_admin()
            with _children_ignore_sigint():
                self._learner.start()
            intake.start()
            robots = RobotProcesses(self._robot_plans(self._server.address))
            with _children_ignore_sigint():
                pids = robots.start()
            learner_pid = self._learner.pid
            record_processes(self.run_dir, pids + ([] if learner_pid is None else [learner_pid]))
            # The run's clock starts when every robot has connected and opened its
            # session and the learner has built its networks, so a slow start (spawn,
            # imports) does not eat into the drift, and the learner's start-up burst of
            # CPU does not make the first control steps miss their deadline (it did:
            # 50 watchdog misses in the first second, straight to PAUSED).
            learner_deadline = time.monotonic() + _LEARNER_START_S
            while not self._stop.is_set() and not (
                robots.all_ready()
                and (self._learner_ready() or time.monotonic() > learner_deadline)
            ):
                if not robots.all_alive():
                    raise RuntimeError("a robot process exited before its session opened")
                await asyncio.sleep(_TICK_S)
            if not self._learner_ready():
                log.warning(
                    "the learner was not ready %.0f s after its start; robots start anyway",
                    _LEARNER_START_S,
                )
            # Everything the run needs is built: keep a full collection over it off the
            # control path (tether.serving.launch.freeze_startup_heap).
            freeze_startup_heap()
            self._t0 = time.monotonic()
            self._live_since = 0.0
            robots.go(self._t0)
            self.event(
                "start",
                f"serving {self.bundle_path} on {self._server.address} to "
                f"{len(robots.processes)} robots",
                version=self._initial,
            )
            await self._watch(robots)
        finally:
            await self._shutdown(robots, intake)

    def _learner_ready(self) -> bool:
        """The learner process has built its networks (it sets the deployed version last)."""
        return self._learner.counters().deployed_version > 0

    def _close_partial(self) -> None:
        """Release what a failed ``_build`` had already made (shared memory, files)."""
        for name in ("_recorder", "_log", "_channel", "_weights"):
            part = self.__dict__.get(name)
            if part is not None:
                try:
                    part.close()
                except Exception:  # already failing: report the first error, not this one
                    log.exception("closing %s after a failed start", name)
        self._journal.close()

    async def _start_admin(self) -> None:
        vcfg = self.config.versions
        if vcfg.admin_tokens_file is None:
            return
        # Operators reach this run like a `tether serve`: list, promote, roll back, and
        # resume from TAKEOVER (the only way out of it).
        auth = AdminAuth.from_file(vcfg.admin_tokens_file)
        servicer = admin_servicer(self._versions, auth)
        if servicer is not None:
            self._admin, port = await start_admin_server(
                servicer,
                auth,
                host=vcfg.admin_host,
                port=vcfg.admin_port,
                credentials=server_credentials(self.config.server.security),
            )
            log.warning("AdminService on %s:%d", vcfg.admin_host, port)

    async def _watch(self, robots: RobotProcesses) -> None:
        """Until the duration is over (and every robot done) or a stop request."""
        mode = self.config.dashboard
        last_snapshot = 0.0
        with dashboard_for(mode) as dash:
            while not self._stop.is_set():
                await asyncio.sleep(_TICK_S)
                self._journal.take(robots.reports())
                over = self.t_s() >= self.config.duration_s
                if over and not robots.any_alive():
                    break
                if self.t_s() - last_snapshot >= self.config.snapshot_interval_s:
                    last_snapshot = self.t_s()
                    snap = self.snapshot()
                    self._journal.snapshots.append(snap)
                    dash.update(snap, tuple(self._journal.recent))

    async def _shutdown(self, robots: RobotProcesses | None, intake: threading.Thread) -> None:
        if robots is not None:
            for _ in robots.winding_down():
                self._journal.take(robots.reports())
                await asyncio.sleep(_TICK_S)
            self._journal.take(robots.reports())
        self._stop.set()
        if intake.is_alive():
            intake.join(timeout=5.0)
        self._journal.snapshots.append(self.snapshot())
        if self._admin is not None:
            await self._admin.stop(self.config.server.grace_s)
        await self._server.stop()
        self._versions.close()
        self._recorder.close()
        self._log.close()
        self._learner.stop()
        self._save_final_bundle()
        collect_latency(self.run_dir, [] if robots is None else robots.names())
        # Nothing is dropped silently: every counter of the data path goes into the log.
        rec = self._recorder.stats()
        how = "finished" if self.interrupted_by is None else "interrupted"
        self.event(
            "stop",
            f"run {how} after {self.t_s():.1f} s",
            details={
                "recorder": asdict(rec.pairing) | rec.losses(),
                "channel": asdict(self._channel.stats()),
                "experience_log": asdict(self._log.stats()),
                "learner": self._learner.counters()._asdict(),
                "interrupted_by": None if self.interrupted_by is None else self.interrupted_by.name,
            },
        )
        self._channel.close()
        self._weights.close()
        self._journal.close()

    def _save_final_bundle(self) -> None:
        live = self._versions.live_engine()
        if live is None:
            return
        state = self._intake.weights_of(live.version.id)
        if state is None and live.version.id == self.bundle.version.id:
            state = self.bundle.actor_state
        if state is None:
            log.warning(
                "no weights kept for live version %d; final bundle not written", live.version.id
            )
            return
        save_derived_bundle(
            self.run_dir / FINAL_BUNDLE_DIR,
            self.bundle,
            actor_state=state,
            version_id=live.version.id,
            version_name=live.version.name,
        )


@contextlib.contextmanager
def _children_ignore_sigint() -> Iterator[None]:
    """Processes started inside inherit SIGINT ignored, from their first instruction.

    Ctrl-C reaches the terminal's whole process group; this process decides when its
    children stop. A spawned child that is still importing when the signal arrives would
    otherwise die of KeyboardInterrupt and look like a crash. (Only the main thread may
    change signal handlers; elsewhere, e.g. a learner restart, the child ignores SIGINT
    itself as its first step.)
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
