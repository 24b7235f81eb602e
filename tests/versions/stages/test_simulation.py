"""The simulation stage on the real simulated arm: paired episodes, a no-harm check."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

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
from tether.versions.stages import simulation
from tether.versions.stages.simulation import SimEpisode, simulation_stage


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
    failed = {m.name for m in worse.measurements if not m.passed}
    assert "final_distance_diff_m" in failed  # SIM_STAGE's success margin is wide
    assert "return_diff" in {f.name for f in worse.figures}  # reported, never judged
    assert measure(worse, "final_distance_diff_m") > SIM_STAGE.distance_margin_m


def test_simulation_passes_a_copy_of_the_parent(
    tmp_path: Path, spec: RobotSpec, supervisor: Supervisor
) -> None:
    reach = reaching_bundle(spec, tmp_path / "r")
    verdict = simulation_stage(
        make_engine(reach), make_engine(reach), SIM_STAGE, randomization=None, supervisor=supervisor
    )
    assert verdict.passed, verdict.describe()
    assert measure(verdict, "success_diff") == 0.0
    assert measure(verdict, "final_distance_diff_m") == 0.0


def test_any_violation_or_contact_of_the_candidate_fails_the_stage(
    monkeypatch: pytest.MonkeyPatch, base_bundle: PolicyBundle
) -> None:
    engine = make_engine(base_bundle)
    clean = SimEpisode(1.0, True, 0, 0.01)
    for harm in (
        dataclasses.replace(clean, joint_limit_violation_steps=1),
        dataclasses.replace(clean, obstacle_contact_steps=2),
    ):
        runs = iter([(harm, clean, clean, clean), (clean,) * 4])  # candidate's, then parent's
        monkeypatch.setattr(simulation, "run_episodes", lambda *a, runs=runs, **k: next(runs))
        verdict = simulation_stage(engine, engine, SIM_STAGE, randomization=None)
        failed = [m for m in verdict.measurements if not m.passed]
        assert len(failed) == 1, verdict.describe()
        assert failed[0].name.endswith("_steps")
        assert (failed[0].threshold, failed[0].direction) == (0.0, "<=")
