"""The learner actor: tether's learner loop where the cluster has the resources.

:class:`LearnerActor` runs the same :class:`tether.learning.learner.Learner` the
embedded learner process runs (replay, SAC updates, trust-region publication, the
learner-side gate stages, checkpoints), inside a Ray actor. Its transition channel and
shared weights are local to the actor; two threads connect them to the fleet:

- the *pump* pulls transitions from the replay actor into the channel;
- the *bridge* sends every publication (its weights as safetensors bytes, its
  learner-side verdicts) to the version service, and feeds what the service says back
  into the shared header: the live version, the resolved one, the degradation level.

If the actor dies, Ray restarts it with the same arguments: the ``Learner`` resumes
from its last checkpoint in ``checkpoint_dir`` (the embedded restart path), and never
reuses a version id (the verdict files say which were used). The edges keep serving
meanwhile: nothing on the serving path waits for the learner.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from tether.data.channel import ChannelConfig, TransitionChannel
from tether.fleet.notes import ActorNote, NoteBook
from tether.fleet.weights import encode_weights
from tether.learning.learner import Learner, LearnerCounters
from tether.learning.learner_config import LearnerConfig
from tether.policy.bundle import load_bundle
from tether.policy.shared_weights import SharedWeights
from tether.versions.verdict_files import list_gate_records, read_gate_verdicts

log = logging.getLogger(__name__)

_CALL_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class LearnerPlan:
    bundle_path: str
    learner_config_json: str
    channel_config_json: str
    checkpoint_dir: str
    verdict_dir: str
    service_name: str
    namespace: str
    sync_interval_s: float
    torch_threads: int
    pull_rows: int = 4096


@dataclass(frozen=True)
class LearnerStatus:
    counters: LearnerCounters
    restarted: bool
    resumed_from_updates: int
    pid: int
    node_id: str
    node_ip: str
    gpus: tuple[str, ...]  # the GPU ids Ray assigned this actor (empty: none)
    pulled: int  # transitions pulled from the replay actor by this incarnation
    publications_sent: int


class LearnerActor:
    """See the module docstring. ``replay`` is the replay actor's handle."""

    def __init__(self, plan: LearnerPlan, replay: Any) -> None:
        import ray

        self.plan = plan
        self.notes = NoteBook()
        ctx = ray.get_runtime_context()
        self.restarted = bool(ctx.was_current_actor_reconstructed)
        self.node_id = ctx.get_node_id()
        self.node_ip = cast(Any, ray).util.get_node_ip_address()
        self.gpus = tuple(str(g) for g in ray.get_gpu_ids())
        torch.set_num_threads(plan.torch_threads)
        self._replay = replay
        self._service: Any = None
        bundle = load_bundle(plan.bundle_path)
        config = LearnerConfig.model_validate_json(plan.learner_config_json)
        arch = bundle.architecture
        self._weights = SharedWeights.create(bundle.manifest.architecture)
        self._channel = TransitionChannel(
            arch.obs_dim, arch.act_dim, ChannelConfig.model_validate_json(plan.channel_config_json)
        )
        # Anchor on what the fleet serves before the learner is built, so its first
        # candidate's id is above the live one.
        self._apply_view(timeout_s=_CALL_TIMEOUT_S)
        self.learner = Learner(
            bundle,
            config,
            channel=self._channel,
            weights=self._weights,
            checkpoint_dir=Path(plan.checkpoint_dir),
            verdict_dir=Path(plan.verdict_dir),
            resume=True,
        )
        self._verdict_dir = Path(plan.verdict_dir)
        self._records_seen = max(
            (r.version for r in list_gate_records(self._verdict_dir)), default=-1
        )
        self._seen: int | None = self._weights.latest_version()
        self._pulled = 0
        self._sent = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._learn, name="learner", daemon=True),
            threading.Thread(target=self._pump, name="replay-pump", daemon=True),
            threading.Thread(target=self._bridge, name="version-bridge", daemon=True),
        ]
        for t in self._threads:
            t.start()
        if self.restarted:
            resumed = self.learner.counters().resumed_from_updates
            self.notes.add(
                "learner_restart",
                f"learner actor restarted by Ray on {self.node_ip} (pid {os.getpid()}), "
                f"resumed from its checkpoint at update {resumed}",
                details={"resumed_from_updates": resumed, "pid": os.getpid()},
            )

    # ----------------------------------------------------------------- threads

    def _learn(self) -> None:
        try:
            self.learner.run(self._stop)
        except Exception as exc:
            log.exception("learner loop failed")
            self.notes.add("learner_crash", f"learner loop failed: {exc}")
            # As the embedded learner process would: exit, and let the supervisor restart it.
            os._exit(1)

    def _pump(self) -> None:
        import ray

        while not self._stop.is_set():
            try:
                rows = ray.get(
                    self._replay.pull.remote(self.plan.pull_rows), timeout=_CALL_TIMEOUT_S
                )
            except Exception as exc:
                log.warning("replay actor unreachable (%s); retrying", type(exc).__name__)
                self._stop.wait(1.0)
                continue
            if len(rows):
                self._channel.put_arrays(rows)
                self._pulled += len(rows)
            else:
                self._stop.wait(0.05)

    def _service_handle(self) -> Any:
        import ray

        if self._service is None:
            self._service = ray.get_actor(self.plan.service_name, namespace=self.plan.namespace)
        return self._service

    def _apply_view(self, timeout_s: float) -> bool:
        import ray

        try:
            view = ray.get(self._service_handle().learner_view.remote(), timeout=timeout_s)
        except Exception:
            self._service = None
            return False
        if view.live_version is not None:
            self._weights.set_live_version(view.live_version)
        if view.resolved_version is not None:
            self._weights.set_resolved_version(view.resolved_version)
        self._weights.set_degradation_level(view.degradation_level)
        return True

    def _bridge(self) -> None:
        while not self._stop.wait(self.plan.sync_interval_s):
            try:
                self._report_rejections()
                self._send_publication()
                self._apply_view(timeout_s=_CALL_TIMEOUT_S)
            except Exception:
                log.exception("version bridge round failed; retrying")

    def _report_rejections(self) -> None:
        for record in list_gate_records(self._verdict_dir, after=self._records_seen):
            self._records_seen = record.version
            if record.passed:
                continue
            last = record.verdicts[-1] if record.verdicts else None
            details: dict[str, Any] = {"stage": last.stage.value if last else "learner"}
            if last is not None:
                details.update({m.name: m.value for m in last.measurements})
            self.notes.add(
                "rejection",
                last.describe() if last else f"version {record.version} rejected",
                version=record.version,
                details=details,
            )

    def _send_publication(self) -> None:
        import ray

        snap = self._weights.read_if_newer(self._seen)
        if snap is None:
            return
        prior = read_gate_verdicts(self._verdict_dir, snap.version) or ()
        try:
            ray.get(
                self._service_handle().submit.remote(
                    snap.version_info(),
                    encode_weights(snap.state),
                    prior=prior,
                    promote_directly=snap.promote_directly,
                    published_ns=time.time_ns(),
                ),
                timeout=_CALL_TIMEOUT_S,
            )
        except Exception as exc:
            # Not marked seen: sent again next round (the service refuses a duplicate id
            # and resolves it, so the learner never waits on a lost publication).
            self._service = None
            log.warning("publication %d not delivered (%s); retrying", snap.version, exc)
            return
        self._seen = snap.version
        self._sent += 1

    # ----------------------------------------------------------------- calls

    def status(self) -> LearnerStatus:
        counters = self.learner.counters()
        return LearnerStatus(
            counters=counters,
            restarted=self.restarted,
            resumed_from_updates=counters.resumed_from_updates,
            pid=os.getpid(),
            node_id=self.node_id,
            node_ip=self.node_ip,
            gpus=self.gpus,
            pulled=self._pulled,
            publications_sent=self._sent,
        )

    def notes_since(self, index: int) -> tuple[int, list[ActorNote]]:
        return self.notes.since(index)

    def stop(self) -> LearnerStatus:
        """Stop the loop (it writes its final checkpoint) and the threads; the final status."""
        self._stop.set()
        for t in self._threads:
            t.join(30.0)
        status = self.status()
        self._channel.close()
        self._weights.close()
        return status
