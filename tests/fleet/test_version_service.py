"""The version service: a publication waits for the gate edge's verdict, then the fleet follows.

The service runs here as a plain object (its ``ray.put`` goes to the session's Ray
instance); the edges' side of the same calls is exercised by test_fleet.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tether.fleet.version_service import (
    GateReport,
    RollbackReport,
    VersionService,
)
from tether.fleet.weights import decode_weights, encode_weights
from tether.policy.manifest import VersionInfo
from tether.policy.tensors import state_sha256
from tether.versions.records import GateStage, Measurement, StageVerdict, VersionState

pytestmark = pytest.mark.ray


def version(i: int, parent: int | None = 1) -> tuple[VersionInfo, bytes]:
    state = {"w": torch.full((2, 2), float(i))}
    return VersionInfo(i, f"v{i}", state_sha256(state), parent), encode_weights(state)


@pytest.fixture
def service(ray_session: Any) -> VersionService:
    info, _ = version(1, None)
    return VersionService(info, gate_edge="edge-0")


def test_a_candidate_goes_to_the_gate_edge_only_and_waits_for_its_verdict(
    service: VersionService, ray_session: Any
) -> None:
    info, payload = version(2)
    assert service.submit(info, payload) is VersionState.CANDIDATE
    gate = service.sync("edge-0", 1, 0)
    other = service.sync("edge-1", 1, 0)
    assert gate.candidate is not None
    assert gate.candidate.version.id == 2
    assert other.candidate is None
    # Not live before the verdict: every edge still sees version 1.
    assert gate.live is not None
    assert gate.live.version.id == 1
    assert service.learner_view().resolved_version is None
    after = service.sync("edge-0", 1, 0, (GateReport(2, True, "passed shadow and canary"),))
    assert after.live is not None
    assert after.live.version.id == 2
    assert after.candidate is None
    # The weights in the object store are the published ones, once for every edge.
    state = decode_weights(ray_session.get(after.live.weights))
    assert state_sha256(state) == info.weights_sha256
    assert service.sync("edge-1", 1, 0).live.version.id == 2  # type: ignore[union-attr]
    view = service.learner_view()
    assert (view.live_version, view.resolved_version) == (2, 2)


def test_a_rejection_resolves_the_candidate_and_keeps_live(service: VersionService) -> None:
    info, payload = version(2)
    service.submit(info, payload)
    view = service.sync("edge-0", 1, 0, (GateReport(2, False, "canary: worse"),))
    assert view.live is not None
    assert view.live.version.id == 1
    assert view.candidate is None
    assert service.learner_view().resolved_version == 2
    assert service.fleet().candidates_rejected == 1


def test_a_failed_learner_stage_never_reaches_the_gate_edge(service: VersionService) -> None:
    info, payload = version(2)
    failed = StageVerdict(
        stage=GateStage.OFFLINE,
        candidate=2,
        baseline=1,
        measurements=(Measurement("kl", 1.0, 0.1, "<="),),
        samples=10,
    )
    assert service.submit(info, payload, prior=(failed,)) is VersionState.REJECTED
    assert service.sync("edge-0", 1, 0).candidate is None


def test_an_edge_rollback_rolls_the_fleet_back_to_last_known_good(
    service: VersionService,
) -> None:
    for i in (2, 3):
        info, payload = version(i, i - 1)
        service.submit(info, payload)
        service.sync("edge-0", i - 1, 0, (GateReport(i, True, "passed"),))
    assert service.fleet().live_version == 3
    view = service.sync("edge-1", 3, 0, (RollbackReport("edge-1", 3, 2, "returns fell"),))
    assert view.live is not None
    assert view.live.version.id == 2
    # A second edge reporting the same rollback changes nothing more.
    service.sync("edge-0", 3, 0, (RollbackReport("edge-0", 3, 2, "returns fell"),))
    assert service.fleet().live_version == 2
    assert service.fleet().rollbacks == 1


def test_the_learner_level_is_the_worst_edge_level(service: VersionService) -> None:
    service.sync("edge-0", 1, 0)
    service.sync("edge-1", 1, 2)
    assert service.learner_view().degradation_level == 2
