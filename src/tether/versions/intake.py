"""The candidate intake: the server's side of the hand-over from the learner.

The learner process and the server share one ``SharedWeights`` block and a verdict
directory. :class:`CandidateIntake` polls both:

- a published candidate is copied out of shared memory, built into an engine, and
  submitted to the gate with the learner-side verdicts from its file as its prior
  stages (``PolicyVersions.submit_candidate``);
- a candidate the learner itself rejected (a verdict file that failed, never
  published) is reported;
- after every change of the live version and every verdict of the server-side gate,
  the shared header tells the learner which version is live and that its pending
  candidate is resolved, so it derives the next one from the live weights.

Invariants: a candidate reaches the registry only as a *candidate* (unless the learner's
configuration asked for the clearly labelled unsafe direct promotion); every
publication is resolved — judged by the gate, or refused here with a reported reason —
so the learner never waits on a candidate the server dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tether.policy.shared_weights import SharedWeights, WeightsSnapshot
from tether.policy.tensors import StateDict
from tether.versions.facade import PolicyVersions
from tether.versions.protocols import EngineLike
from tether.versions.records import (
    GateRecord,
    LiveChange,
    StageVerdict,
    VersionRecord,
    VersionSource,
    VersionState,
)
from tether.versions.server_gate import GateOutcome
from tether.versions.verdict_files import list_gate_records, read_gate_verdicts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CandidateSubmitted:
    """A publication entered the gate (or went live, when it asked to skip it)."""

    record: VersionRecord  # as registered; its id is the registry's
    learner_version: int  # the id the learner published it under
    parent: int | None
    prior: tuple[StageVerdict, ...]  # the learner-side stages it passed


@dataclass(frozen=True)
class CandidateRefused:
    """A publication that could not be submitted (unreadable, or refused by the registry)."""

    learner_version: int
    reason: str


@dataclass(frozen=True)
class LearnerRejected:
    """A candidate the learner-side gate rejected: never published, reported from its file."""

    record: GateRecord


IntakeEvent = CandidateSubmitted | CandidateRefused | LearnerRejected


class CandidateIntake:
    """See the module docstring. ``build_engine(snapshot)`` makes an engine serving the
    snapshot's weights as the snapshot's version; ``on_event`` hears every publication."""

    def __init__(
        self,
        versions: PolicyVersions,
        weights: SharedWeights,
        *,
        verdict_dir: Path,
        build_engine: Callable[[WeightsSnapshot], EngineLike],
        on_event: Callable[[IntakeEvent], None] = lambda _event: None,
    ) -> None:
        self._versions = versions
        self._weights = weights
        self._verdict_dir = verdict_dir
        self._build_engine = build_engine
        self._on_event = on_event
        # registry id -> the learner's id of the same candidate
        self._learner_ids: dict[int, int] = {}
        # The weights of every publication, by the learner's id.
        self._states: dict[int, StateDict] = {}
        self._seen: int | None = None
        self._records_seen = -1
        versions.add_live_listener(self._on_live_change)
        versions.promotion.add_listener(self._on_gate)

    def weights_of(self, learner_version: int) -> StateDict | None:
        """The weights the learner published as ``learner_version``, if it did."""
        return self._states.get(learner_version)

    def run(self, stop: threading.Event, poll_s: float) -> None:
        """Poll every ``poll_s`` until ``stop`` is set (the body of a thread)."""
        while not stop.wait(poll_s):
            self.poll()

    def poll(self) -> None:
        """Report new learner-side rejections and submit a new publication, if any."""
        try:
            for record in list_gate_records(self._verdict_dir, after=self._records_seen):
                self._records_seen = record.version
                if not record.passed:
                    self._on_event(LearnerRejected(record))
            snap = self._weights.read_if_newer(self._seen)
        except Exception:  # a file or header read mid-write is retried on the next poll
            log.exception("reading the learner's publications failed; retrying")
            return
        if snap is None:
            return
        self._seen = snap.version
        self._states[snap.version] = snap.state
        try:
            self._submit(snap)
        except Exception as exc:
            self._weights.set_resolved_version(snap.version)
            self._on_event(CandidateRefused(snap.version, str(exc)))

    def _submit(self, snap: WeightsSnapshot) -> None:
        engine = self._build_engine(snap)
        prior = read_gate_verdicts(self._verdict_dir, snap.version) or ()
        record = self._versions.submit_candidate(
            engine, prior, source=VersionSource.LEARNER, promote_directly=snap.promote_directly
        )
        self._learner_ids[record.id] = snap.version
        self._on_event(CandidateSubmitted(record, snap.version, snap.parent, prior))
        if record.state is VersionState.LIVE and snap.promote_directly:
            self._weights.set_resolved_version(snap.version)

    def _on_live_change(self, change: LiveChange) -> None:
        # The learner anchors its next candidate on whatever is live now.
        self._weights.set_live_version(self._learner_ids.get(change.current.id, change.current.id))
        if self._learner_ids:
            # Any change of the live version ends the evaluation in progress (promoted, or
            # abandoned by an operator's promotion or a rollback): the learner may go on.
            self._weights.set_resolved_version(max(self._learner_ids.values()))

    def _on_gate(self, outcome: GateOutcome) -> None:
        if outcome.promoted:  # the live change (live, then resolved) already told the learner
            return
        learner_id = self._learner_ids.get(outcome.version)
        if learner_id is not None:
            self._weights.set_resolved_version(learner_id)
