"""The shipped position-arm bundle: verified, small, with critics, stepping from the
command inside the supervisor's rate limits; through the supervisor it reaches targets
on the nominal arm, rarely corrected, and the demo drift defeats it while the oracle
keeps its success."""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources import files
from pathlib import Path

import numpy as np
import pytest

from tether.policy import EngineConfig, PolicyEngine, load_bundle
from tether.safety.for_spec import supervisor_for
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


def test_shipped_position_bundle_steps_from_the_command_inside_the_rate_limits() -> None:
    frame = load_bundle(ROOT).manifest.action.frame
    spec = arm_spec("position")
    assert frame is not None
    dt = spec.control_period_s
    assert all(
        s < v * dt
        for s, v in zip(frame.velocity_step_rad, spec.joint_velocity_limit_rad_s, strict=True)
    )
    assert all(
        s < a * dt * dt
        for s, a in zip(
            frame.acceleration_step_rad, spec.joint_acceleration_limit_rad_s2, strict=True
        )
    )


def _served(deterministic: bool) -> Act:
    """The shipped policy as robots get it: PolicyEngine.act, its action frame included."""
    engine = PolicyEngine(load_bundle(ROOT), EngineConfig(execution="eager", seed=0))

    def act(obs: np.ndarray) -> np.ndarray:
        return engine.act(obs[None, :].astype(np.float32), deterministic).actions[0]

    return act


class _Supervised:
    """``act`` behind a fresh position supervisor per episode, counting its corrections."""

    def __init__(self, act: Act, reset: Callable[[], None] | None = None) -> None:
        self._act, self._inner_reset = act, reset
        self.steps = self.corrected = 0
        self.reset()

    def reset(self) -> None:
        self._supervisor = supervisor_for(arm_spec("position"))
        self._previous: np.ndarray | None = None
        if self._inner_reset is not None:
            self._inner_reset()

    def act(self, obs: np.ndarray) -> np.ndarray:
        action, verdict = self._supervisor.filter(obs, self._act(obs), self._previous)
        self._previous = action
        self.steps += 1
        self.corrected += verdict.intervened
        return action


@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "sampled"])
def test_shipped_position_policy_settles_on_targets_through_the_supervisor(
    deterministic: bool,
) -> None:
    """On the nominal arm, through the supervisor, as the fleet runs it: it settles on
    targets and the supervisor rarely corrects it (sampled actions included)."""
    supervised = _Supervised(_served(deterministic))
    success = _success(supervised.act, supervised.reset, ArmDynamics.nominal())
    assert success >= 0.8
    assert supervised.corrected / supervised.steps < 0.1


def _success(act: Act, reset: Callable[[], None] | None, dynamics: ArmDynamics) -> float:
    env = ArmEnv(dynamics=dynamics, seed=0, config=POSITION)
    return success_rate(run_episodes(env, act, range(TASKS), reset=reset))


def test_demo_drift_defeats_the_frozen_policy_but_not_the_oracle() -> None:
    """The small-scale frozen/oracle gap through the supervisor (benchmarks/bench_task.py
    --supervised: 100 tasks)."""
    frozen = _served(True)
    nominal_run = _Supervised(frozen)
    nominal = _success(nominal_run.act, nominal_run.reset, ArmDynamics.nominal())
    drifted_run = _Supervised(frozen)
    drifted = _success(drifted_run.act, drifted_run.reset, WORN)
    oracle = ReachController(arm_spec("position"), dynamics=WORN)
    oracle_nominal = ReachController(arm_spec("position"), dynamics=ArmDynamics.nominal())
    worn_oracle = _Supervised(oracle.act, oracle.reset)
    nominal_oracle = _Supervised(oracle_nominal.act, oracle_nominal.reset)
    kept_by_oracle = _success(worn_oracle.act, worn_oracle.reset, WORN) / _success(
        nominal_oracle.act, nominal_oracle.reset, ArmDynamics.nominal()
    )
    assert nominal >= 0.8
    assert drifted <= 0.5 * nominal
    assert kept_by_oracle >= 0.9
