"""The version service: the fleet's registry of policy versions, as one named Ray actor.

It holds a :class:`tether.versions.registry.ModelRegistry` of :class:`PublishedWeights`
(identity + an object-store reference, no engine): which version is live, which is
last-known-good, which were rejected. It does not judge candidates itself: the gate's
server-side stages (shadow, canary) run where live traffic is, at the **gate edge**,
in that edge's own :class:`tether.versions.facade.PolicyVersions`, exactly as in the
embedded server; the gate edge reports the outcome and the service makes it the
fleet's. Every edge asks :meth:`VersionService.sync` a few times a second what is live
and swaps to it between batches; the learner asks :meth:`VersionService.learner_view`
what is live and resolved.

Invariants: a learner publication enters the registry as a *candidate* and becomes
live only through the gate edge's verdict (or the learner's clearly labelled unsafe
``promote_directly``); every publication is resolved (judged, superseded or refused),
so the learner never waits forever; each version's weights are put into the object
store once, here, so they outlive the learner that made them. If this actor is lost,
nothing changes at the edges: each keeps serving its live version.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from tether.fleet.notes import ActorNote, NoteBook
from tether.fleet.weights import PublishedWeights
from tether.policy.manifest import VersionInfo
from tether.versions.errors import VersionError
from tether.versions.records import StageVerdict, VersionSource, VersionState
from tether.versions.registry import ModelRegistry

SERVICE_NAME = "tether-versions"  # a run names its service SERVICE_NAME-<run directory>


@dataclass(frozen=True)
class GateReport:
    """The gate edge's verdict on the candidate it was handed."""

    version: int
    promoted: bool
    reason: str
    verdicts: tuple[StageVerdict, ...] = ()


@dataclass(frozen=True)
class RollbackReport:
    """An edge's rollback monitor rolled ``from_version`` back."""

    edge_id: str
    from_version: int
    to_version: int
    reason: str


@dataclass(frozen=True)
class EdgeView:
    """What :meth:`VersionService.sync` tells an edge."""

    live: PublishedWeights | None
    candidate: PublishedWeights | None  # for the gate edge only: the version to gate


@dataclass(frozen=True)
class LearnerView:
    live_version: int | None
    resolved_version: int | None
    degradation_level: int  # the highest learning-wide level any edge reported


@dataclass(frozen=True)
class EdgeServing:
    version: int
    since_ns: int  # time.time_ns() when the edge first reported serving it


@dataclass(frozen=True)
class FleetVersions:
    """The registry's view for the driver's snapshots and the benchmark."""

    live_version: int | None
    serving: dict[str, EdgeServing]
    published_ns: dict[int, int]  # version -> when the learner published it
    candidates_passed: int
    candidates_rejected: int
    rollbacks: int


class VersionService:
    """See the module docstring."""

    def __init__(self, initial: VersionInfo, *, gate_edge: str) -> None:
        self.gate_edge = gate_edge
        self._lock = threading.RLock()
        self._registry: ModelRegistry[Any] = ModelRegistry()
        # The bundle's version: every edge holds its weights already (weights=None).
        self._registry.register(
            PublishedWeights(version=initial, weights=None, published_ns=time.time_ns()),
            source=VersionSource.BUNDLE,
        )
        self._pending: PublishedWeights | None = None
        self._resolved: int | None = None
        self._levels: dict[str, int] = {}
        self._serving: dict[str, EdgeServing] = {}
        self._published_ns: dict[int, int] = {}
        self._passed = 0
        self._rejected = 0
        self._rollbacks = 0
        self.notes = NoteBook()

    # ----------------------------------------------------------------- learner

    def submit(self, version: VersionInfo, payload: bytes, **kw: Any) -> VersionState:
        """A learner publication (``payload``: safetensors bytes) enters the fleet.

        ``kw``: ``prior`` (the learner-side verdicts), ``promote_directly``, ``published_ns``.
        """
        import ray  # in the actor's process; never on import of this module

        published = PublishedWeights(
            version=version,
            weights=ray.put(payload),
            published_ns=int(kw.get("published_ns", time.time_ns())),
            prior=tuple(kw.get("prior", ())),
            promote_directly=bool(kw.get("promote_directly", False)),
        )
        with self._lock:
            try:
                record = self._registry.register(
                    published, source=VersionSource.LEARNER, make_live_if_first=False
                )
            except VersionError as exc:
                self._resolved = version.id
                self.notes.add(
                    "rejection",
                    f"candidate {version.id} refused at intake: {exc}",
                    version=version.id,
                    details={"stage": "intake"},
                )
                return VersionState.REJECTED
            self._published_ns[version.id] = published.published_ns
            prior = [v.stage.value for v in published.prior if v.passed]
            self.notes.add(
                "candidate",
                f"learner published version {version.id} (parent {version.parent}); "
                f"learner-side stages passed: {prior}",
                version=version.id,
                details={"parent": version.parent, "prior_stages": prior},
            )
            if published.promote_directly:
                reason = "promote_directly: went live WITHOUT the promotion gate (unsafe)"
                self._resolved = version.id
                self._passed += 1
                self._registry.promote(record.id, reason)
                self.notes.add(
                    "promotion", reason, version=version.id, details={"stages_passed": []}
                )
                return VersionState.LIVE
            if any(not v.passed for v in published.prior):
                self._reject(version.id, "a learner-side stage failed", published.prior)
                return VersionState.REJECTED
            self._supersede()
            self._pending = published
            return VersionState.CANDIDATE

    def learner_view(self) -> LearnerView:
        with self._lock:
            live = self._registry.live()
            return LearnerView(
                live_version=None if live is None else live.id,
                resolved_version=self._resolved,
                degradation_level=max(self._levels.values(), default=0),
            )

    # ----------------------------------------------------------------- edges

    def sync(
        self,
        edge_id: str,
        serving_version: int | None,
        degradation_level: int,
        reports: tuple[GateReport | RollbackReport, ...] = (),
    ) -> EdgeView:
        """An edge's reports go in (its gate's verdicts, its rollbacks); the fleet's live
        version (and, for the gate edge, the candidate to gate) comes back."""
        with self._lock:
            for report in reports:
                if isinstance(report, GateReport):
                    self._on_gate(report)
                else:
                    self._on_rollback(report)
            self._levels[edge_id] = degradation_level
            if serving_version is not None:
                seen = self._serving.get(edge_id)
                if seen is None or seen.version != serving_version:
                    self._serving[edge_id] = EdgeServing(serving_version, time.time_ns())
            live = self._registry.live()
            live_weights = None if live is None else self._registry.engine(live.id)
            candidate = self._pending if edge_id == self.gate_edge else None
            return EdgeView(live=live_weights, candidate=candidate)

    def forget_edge(self, edge_id: str) -> None:
        """An edge restarted: what it served before says nothing about what it serves now."""
        with self._lock:
            self._serving.pop(edge_id, None)

    # ----------------------------------------------------------------- reads

    def fleet(self) -> FleetVersions:
        with self._lock:
            live = self._registry.live()
            return FleetVersions(
                live_version=None if live is None else live.id,
                serving=dict(self._serving),
                published_ns=dict(self._published_ns),
                candidates_passed=self._passed,
                candidates_rejected=self._rejected,
                rollbacks=self._rollbacks,
            )

    def live_weights(self) -> PublishedWeights | None:
        """The live version and its weights' reference (None weights: the bundle's)."""
        with self._lock:
            live = self._registry.live()
            return None if live is None else self._registry.engine(live.id)

    def notes_since(self, index: int) -> tuple[int, list[ActorNote]]:
        return self.notes.since(index)

    def ping(self) -> bool:
        return True

    def location(self) -> tuple[str, str, int]:
        """Where this actor runs: (node id, node address, pid)."""
        from tether.fleet.placement import here

        return here()

    # ----------------------------------------------------------------- internals

    def _on_gate(self, report: GateReport) -> None:
        pending = self._pending
        if pending is None or pending.version.id != report.version:
            return  # a verdict on a candidate superseded since: already resolved
        self._pending = None
        self._resolved = report.version
        if report.promoted:
            self._passed += 1
            stages = [v.stage.value for v in report.verdicts if v.passed]
            self._registry.promote(report.version, report.reason)
            self.notes.add(
                "promotion",
                report.reason,
                version=report.version,
                details={"stages_passed": stages, "gate_edge": self.gate_edge},
            )
        else:
            self._reject(report.version, report.reason, report.verdicts)

    def _on_rollback(self, report: RollbackReport) -> None:
        live = self._registry.live()
        if live is None or live.id != report.from_version:
            return  # another edge's report of the same rollback came first
        # The fleet's last-known-good decides (it may differ from the edge's, if the edge
        # restarted in between); every edge, the reporting one too, follows it on its sync.
        change = self._registry.rollback(f"{report.edge_id}: {report.reason}")
        self._rollbacks += 1
        # A rollback ends the evaluation in progress (as in the embedded gate).
        self._supersede("evaluation abandoned: the live version was rolled back")
        self._resolved = max(self._published_ns, default=None)
        self.notes.add(
            "rollback",
            f"{report.edge_id}: {report.reason}",
            version=change.current.id,
            details={
                "stage": "rollback",
                "from_version": report.from_version,
                "edge_to_version": report.to_version,
            },
        )

    def _reject(self, version: int, reason: str, verdicts: tuple[StageVerdict, ...]) -> None:
        self._rejected += 1
        self._resolved = version
        self._registry.transition(version, VersionState.REJECTED, reason)
        last = verdicts[-1] if verdicts else None
        details: dict[str, Any] = {"stage": last.stage.value if last else "unknown"}
        if last is not None:
            details.update({m.name: m.value for m in last.measurements})
        self.notes.add("rejection", reason, version=version, details=details)

    def _supersede(self, why: str = "superseded by a newer candidate") -> None:
        old, self._pending = self._pending, None
        if old is None:
            return
        state = self._registry.get(old.version.id).state
        if state is VersionState.CANDIDATE:
            self._registry.transition(old.version.id, VersionState.RETIRED, why)
        self._resolved = old.version.id
