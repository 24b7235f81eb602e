"""The candidate intake: publications in shared memory become registry candidates, and the
learner hears back which version is live and when its candidate is resolved."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.versions.builders import make_engine, nudged
from tether.policy.bundle import PolicyBundle
from tether.policy.engine import PolicyEngine
from tether.policy.shared_weights import SharedWeights, WeightsSnapshot
from tether.safety.supervisor import Supervisor
from tether.versions.facade import PolicyVersions, VersionsConfig
from tether.versions.intake import (
    CandidateIntake,
    CandidateRefused,
    CandidateSubmitted,
    IntakeEvent,
    LearnerRejected,
)
from tether.versions.records import GateRecord, GateStage, Measurement, StageVerdict, VersionState
from tether.versions.verdict_files import write_gate_record


def _intake(
    tmp_path: Path, base_bundle: PolicyBundle, supervisor: Supervisor
) -> tuple[PolicyVersions, SharedWeights, CandidateIntake, list[IntakeEvent]]:
    versions = PolicyVersions(
        VersionsConfig(), engine_factory=make_engine, shadow_supervisor=supervisor
    )
    versions.load(base_bundle.path, make_live=True)  # type: ignore[arg-type]
    weights = SharedWeights.create(base_bundle.manifest.architecture)

    def build(snap: WeightsSnapshot) -> PolicyEngine:
        engine = make_engine(base_bundle)
        engine.swap_weights(snap.version_info(), snap.state)
        return engine

    events: list[IntakeEvent] = []
    intake = CandidateIntake(
        versions,
        weights,
        verdict_dir=tmp_path / "gate",
        build_engine=build,
        on_event=events.append,
    )
    return versions, weights, intake, events


def _offline(version: int, *, passed: bool) -> StageVerdict:
    value = 0.01 if passed else 0.5
    m = Measurement("action_change_rms", value, 0.1, "<=")
    return StageVerdict(GateStage.OFFLINE, version, 1, (m,), 64)


def test_a_publication_enters_the_gate_with_its_learner_verdicts(
    tmp_path: Path, base_bundle: PolicyBundle, supervisor: Supervisor
) -> None:
    versions, weights, intake, events = _intake(tmp_path, base_bundle, supervisor)
    try:
        state = {k: nudged(k, v.clone()) for k, v in base_bundle.actor_state.items()}
        write_gate_record(tmp_path / "gate", GateRecord(2, 1, True, (_offline(2, passed=True),)))
        weights.publish(2, state, parent=1)
        intake.poll()
        assert len(events) == 1
        submitted = events[0]
        assert isinstance(submitted, CandidateSubmitted)
        assert submitted.learner_version == 2
        assert [v.stage for v in submitted.prior] == [GateStage.OFFLINE]
        record = versions.registry.get(2)
        assert record.state is VersionState.SHADOW  # a candidate, in the gate: not live
        assert record.name == "learner-v2"
        assert versions.promotion.verdicts(2)[0].stage is GateStage.OFFLINE
        held = intake.weights_of(2)
        assert held is not None
        assert all(torch.equal(held[k], state[k]) for k in state)
        intake.poll()  # nothing new: nothing submitted twice
        assert len(events) == 1
        assert weights.pending_version() == 2  # the learner waits for the verdict
    finally:
        weights.close()


def test_learner_side_rejections_are_reported_once(
    tmp_path: Path, base_bundle: PolicyBundle, supervisor: Supervisor
) -> None:
    _, weights, intake, events = _intake(tmp_path, base_bundle, supervisor)
    try:
        write_gate_record(tmp_path / "gate", GateRecord(2, 1, False, (_offline(2, passed=False),)))
        intake.poll()
        intake.poll()
        assert len(events) == 1
        assert isinstance(events[0], LearnerRejected)
        assert events[0].record.version == 2
    finally:
        weights.close()


def test_a_publication_the_registry_refuses_is_resolved_and_reported(
    tmp_path: Path, base_bundle: PolicyBundle, supervisor: Supervisor
) -> None:
    _, weights, intake, events = _intake(tmp_path, base_bundle, supervisor)
    try:
        # Version 1 is the live bundle's id: not fresh, so the registry refuses it.
        weights.publish(1, dict(base_bundle.actor_state), parent=1)
        intake.poll()
        assert len(events) == 1
        assert isinstance(events[0], CandidateRefused)
        assert "not fresh" in events[0].reason
        assert weights.pending_version() is None  # resolved: the learner may go on
    finally:
        weights.close()


def test_a_promotion_tells_the_learner_what_is_live(
    tmp_path: Path, base_bundle: PolicyBundle, supervisor: Supervisor
) -> None:
    versions, weights, intake, _ = _intake(tmp_path, base_bundle, supervisor)
    try:
        state = {k: nudged(k, v.clone()) for k, v in base_bundle.actor_state.items()}
        weights.publish(2, state, parent=1)
        intake.poll()
        versions.registry.promote(2, "operator")
        assert weights.live_version() == 2
        assert weights.pending_version() is None
    finally:
        weights.close()
