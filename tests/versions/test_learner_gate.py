"""The learner-side gate: its stages in order, stopping at the first failure."""

from __future__ import annotations

from pathlib import Path

from tests.versions.builders import (
    SIM_STAGE,
    arm_observations,
    derived,
    make_engine,
    negated,
    reaching_bundle,
)
from tether.safety.supervisor import Supervisor
from tether.spec import RobotSpec
from tether.versions.learner_gate import LearnerGate, LearnerGateConfig
from tether.versions.records import GateStage
from tether.versions.stages.offline import OfflineStageConfig


def test_gate_stops_at_the_first_failure_so_a_negated_policy_is_never_simulated(
    tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    reach_bundle = reaching_bundle(spec, tmp_path / "r")
    live = make_engine(reach_bundle)
    flipped = make_engine(derived(reach_bundle, tmp_path / "flip", 3, "flipped", negated))
    obs = arm_observations(spec, 128, seed=2)
    gate = LearnerGate(LearnerGateConfig(simulation=SIM_STAGE), supervisor=supervisor)
    verdicts = gate.evaluate(flipped, live, obs)
    assert [v.stage for v in verdicts] == [GateStage.OFFLINE]
    assert not verdicts[0].passed
    # With the offline stage switched off, the simulation stage still refuses it.
    no_offline = LearnerGateConfig(offline=OfflineStageConfig(enabled=False), simulation=SIM_STAGE)
    verdicts = LearnerGate(no_offline, supervisor=supervisor).evaluate(flipped, live, obs)
    assert [v.stage for v in verdicts] == [GateStage.SIMULATION]
    assert not verdicts[0].passed
