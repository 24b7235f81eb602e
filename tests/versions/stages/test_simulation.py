"""The simulation stage on the real simulated arm: paired episodes, non-inferiority."""

from __future__ import annotations

from pathlib import Path

from tests.versions.builders import (
    SIM_STAGE,
    make_engine,
    measure,
    reaching_bundle,
)
from tether.policy.bundle import PolicyBundle
from tether.safety.supervisor import Supervisor
from tether.spec import RobotSpec
from tether.versions.records import GateStage
from tether.versions.stages.simulation import simulation_stage


def test_simulation_passes_a_genuinely_better_policy_and_rejects_a_worse_one(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    reach = make_engine(reaching_bundle(spec, tmp_path / "r"))
    random_init = make_engine(base_bundle)
    better = simulation_stage(
        reach, random_init, SIM_STAGE, randomization=None, supervisor=supervisor
    )
    worse = simulation_stage(
        random_init, reach, SIM_STAGE, randomization=None, supervisor=supervisor
    )
    assert better.stage is GateStage.SIMULATION
    assert better.samples == 8
    assert better.passed
    assert not worse.passed
    assert measure(worse, "return_diff_lower_bound") < -SIM_STAGE.return_margin
