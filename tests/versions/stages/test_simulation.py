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


def test_a_candidate_that_only_moves_where_it_reaches_is_held_to_the_reach_margins(
    tmp_path: Path,
) -> None:
    """Only the goal shift changed: success may fall by goal_shift_success_margin and the
    distance grow by goal_shift_distance_margin_m; change anything else and the ordinary margins
    apply (the same candidate's layers nudged fails them)."""
    import numpy as np
    import torch

    from tether.learning.hindsight import HindsightConfig, bundle_for_learner
    from tether.learning.learner_config import LearnerConfig
    from tether.policy import PolicyEngine, init_bundle, load_bundle, save_derived_bundle
    from tether.sim import arm_spec
    from tether.versions.stages.simulation import SimulationStageConfig

    spec = arm_spec("position")
    init_bundle(tmp_path / "plain", spec, hidden_sizes=(16, 16), seed=2)
    goal = LearnerConfig(hindsight=HindsightConfig.goal_relabelling())
    live = load_bundle(bundle_for_learner(tmp_path / "plain", goal, tmp_path))
    shifted = {k: v.clone() for k, v in live.actor_state.items()}
    shifted["goal.net.4.bias"] = torch.tensor([0.0, 0.0, float(np.arctanh(0.6))])
    both = {k: v.clone() for k, v in shifted.items()}
    both["head.mu.bias"] = both["head.mu.bias"] + 1e-3
    config = SimulationStageConfig(episodes=2, randomization=None)

    def thresholds(state: dict[str, torch.Tensor], name: str) -> dict[str, float]:
        cand = save_derived_bundle(
            tmp_path / name, live, actor_state=state, version_id=2, version_name=name
        )
        verdict = simulation_stage(
            PolicyEngine(cand), PolicyEngine(live), config, randomization=None
        )
        return {m.name: m.threshold for m in verdict.measurements}

    reach_only = thresholds(shifted, "reach")
    assert reach_only["success_diff"] == -config.goal_shift_success_margin
    assert reach_only["final_distance_diff_m"] == pytest.approx(
        config.distance_margin_m + config.goal_shift_distance_margin_m
    )
    ordinary = thresholds(both, "both")
    assert ordinary["success_diff"] == -config.success_margin
    assert ordinary["final_distance_diff_m"] == config.distance_margin_m
