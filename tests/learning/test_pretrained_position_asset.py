"""The shipped position-arm bundle: verified, small, with critics; it reaches targets on
the nominal arm, and the demo drift defeats it while the oracle keeps its success."""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources import files
from pathlib import Path

import numpy as np
import torch

from tether.learning.evaluation import ObservationNormalizer, evaluate_actor
from tether.policy import load_bundle
from tether.sim import ArmDynamics, ArmEnv, ArmEnvConfig, DriftSchedule, arm_spec
from tether.sim.controllers import ReachController
from tether.sim.episodes import Act, run_episodes, success_rate

ROOT = Path(str(files("tether.assets") / "pretrained-position" / "arm"))
POSITION = ArmEnvConfig(command_interface="position")
WORN = DriftSchedule.demo().dynamics_at(10**9, ArmDynamics.nominal())
TASKS = 20


def test_shipped_position_bundle_is_small_verified_and_carries_its_critics() -> None:
    assert sum(f.stat().st_size for f in ROOT.iterdir()) <= 2 * 1024 * 1024
    bundle = load_bundle(ROOT)
    assert bundle.robot_spec == arm_spec("position")
    assert bundle.robot_spec.fingerprint() != arm_spec("torque").fingerprint()
    assert bundle.training is not None
    assert bundle.manifest.metadata.algorithm == "sac"
    assert "behaviour-cloned warm start" in bundle.manifest.metadata.source


def test_shipped_position_policy_settles_on_targets_of_the_nominal_arm() -> None:
    bundle = load_bundle(ROOT)
    result = evaluate_actor(
        bundle.build_actor(),
        ObservationNormalizer(bundle.manifest.normalizer),
        ArmEnv(seed=3, config=POSITION),
        TASKS,
        seed=30_000,
    )
    assert result.success_rate >= 0.8
    assert result.mean_final_distance_m < 0.05


def test_sampled_actions_still_reach_targets() -> None:
    """The robots send sampled actions while learning: an absolute target is jittered by
    the policy's spread, so the shipped spread must leave the task solvable."""
    bundle = load_bundle(ROOT)
    actor = bundle.build_actor().eval()
    normalize = ObservationNormalizer(bundle.manifest.normalizer)
    generator = torch.Generator().manual_seed(0)

    def sampled(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            x = torch.from_numpy(normalize(obs[None, :]))
            action, _ = actor.sample(x, deterministic=False, generator=generator)
        return action.numpy()[0]

    assert _success(sampled, None, ArmDynamics.nominal()) >= 0.8


def _success(act: Act, reset: Callable[[], None] | None, dynamics: ArmDynamics) -> float:
    env = ArmEnv(dynamics=dynamics, seed=0, config=POSITION)
    return success_rate(run_episodes(env, act, range(TASKS), reset=reset))


def test_demo_drift_defeats_the_frozen_policy_but_not_the_oracle() -> None:
    """The small-scale frozen/oracle gap (benchmarks/bench_task.py: 100 tasks)."""
    bundle = load_bundle(ROOT)
    actor = bundle.build_actor().eval()
    normalize = ObservationNormalizer(bundle.manifest.normalizer)

    def frozen(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            action, _ = actor.sample(torch.from_numpy(normalize(obs[None, :])), deterministic=True)
        return action.numpy()[0]

    nominal = _success(frozen, None, ArmDynamics.nominal())
    drifted = _success(frozen, None, WORN)
    oracle = ReachController(arm_spec("position"), dynamics=WORN)
    oracle_nominal = ReachController(arm_spec("position"), dynamics=ArmDynamics.nominal())
    kept_by_oracle = _success(oracle.act, oracle.reset, WORN) / _success(
        oracle_nominal.act, oracle_nominal.reset, ArmDynamics.nominal()
    )
    assert nominal >= 0.8
    assert drifted <= 0.5 * nominal
    assert kept_by_oracle >= 0.9
