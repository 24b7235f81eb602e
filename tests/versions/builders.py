"""Builders and fixtures of the versions tests: real bundles and engines for the built-in arm.

The fixtures are registered by ``tests/versions/conftest.py`` and, for the edge tests of
versions, ``tests/serving/conftest.py``.

Every engine here is a real ``PolicyEngine`` over a real bundle written by
``init_bundle``; "bad" candidates are real bundles whose weights were changed on purpose.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from tether.policy.bundle import PolicyBundle, load_bundle, save_derived_bundle
from tether.policy.config import EngineConfig
from tether.policy.engine import PolicyEngine
from tether.policy.initialize import init_bundle
from tether.safety.limits import SafetyLimits
from tether.safety.supervisor import Supervisor
from tether.sim import ArmKinematics, arm_spec
from tether.spec import RobotSpec
from tether.versions.records import EpisodeOutcome, StageVerdict
from tether.versions.stages.simulation import SimulationStageConfig

HIDDEN = (32, 32)


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def spec() -> RobotSpec:
    # The arm's torque interface: reaching_bundle writes a torque controller as weights.
    return arm_spec("torque")


def make_engine(bundle: PolicyBundle) -> PolicyEngine:
    return PolicyEngine(bundle, EngineConfig(execution="eager", num_threads=1))


def derived(
    base: PolicyBundle,
    path: Path,
    version_id: int,
    name: str,
    change: Callable[[str, torch.Tensor], torch.Tensor],
) -> PolicyBundle:
    """A new bundle from ``base`` whose every tensor went through ``change(name, t)``."""
    state = {k: change(k, v.clone()) for k, v in base.actor_state.items()}
    return save_derived_bundle(
        path, base, actor_state=state, version_id=version_id, version_name=name
    )


def negated(name: str, t: torch.Tensor) -> torch.Tensor:
    """Negates the mean head: tanh(-mu) = -tanh(mu), so every action flips sign."""
    return -t if name.startswith("head.mu.") else t


def nudged(name: str, t: torch.Tensor) -> torch.Tensor:
    """A tiny change of the mean head's bias: a new version that acts almost the same."""
    return t + 1e-3 if name == "head.mu.bias" else t


@pytest.fixture
def base_bundle(tmp_path: Path, spec: RobotSpec) -> PolicyBundle:
    init_bundle(tmp_path / "base", spec, hidden_sizes=HIDDEN, seed=0, version_id=1)
    return load_bundle(tmp_path / "base")


@pytest.fixture
def supervisor(spec: RobotSpec) -> Supervisor:
    return Supervisor(SafetyLimits.from_spec(spec), kinematics=ArmKinematics())


def arm_observations(spec: RobotSpec, n: int, seed: int) -> np.ndarray:
    """Observations of the arm at rest-ish states spread over its declared ranges."""
    rng = np.random.default_rng(seed)
    lay = spec.layout
    obs = np.zeros((n, spec.obs_dim), dtype=np.float32)
    lo = np.asarray(spec.joint_position_low_rad)
    hi = np.asarray(spec.joint_position_high_rad)
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    obs[:, slice(*lay.joint_position)] = mid + 0.5 * half * rng.uniform(-1, 1, (n, len(lo)))
    vmax = np.asarray(spec.joint_velocity_limit_rad_s)
    obs[:, slice(*lay.joint_velocity)] = 0.1 * vmax * rng.uniform(-1, 1, (n, len(vmax)))
    ws_lo, ws_hi = np.asarray(spec.workspace.low), np.asarray(spec.workspace.high)
    for span in (lay.end_effector, lay.target):
        obs[:, slice(*span)] = rng.uniform(ws_lo, ws_hi, (n, 3))
    return obs


def reaching_bundle(
    spec: RobotSpec, base_dir: Path, *, kp: float = 300.0, kd: float = 5.0
) -> PolicyBundle:
    """A genuinely good policy for the arm, written as real bundle weights.

    A Jacobian-transpose reaching controller linearized at home with gravity
    compensation: ``tau = J^T kp (target - ee) - kd qdot + g(home)``, scaled to normalized
    torques. The actor's ReLU trunk carries ``[x; -x]`` through unchanged, so the mean
    head computes this linear map exactly. On the nominal arm it reaches most targets
    while a randomly initialized actor reaches none.
    """
    d = spec.obs_dim
    hidden = 2 * d
    base = init_bundle(base_dir / "reach-init", spec, hidden_sizes=(hidden, hidden), seed=0)
    kin = ArmKinematics()
    home = np.asarray(spec.home_position_rad, dtype=np.float64)
    tau = np.asarray(spec.torque_limit_nm, dtype=np.float64)
    n = spec.n_joints
    step = 1e-4
    jac = np.stack(
        [
            (kin.end_effector(home + step * e) - kin.end_effector(home - step * e)) / (2 * step)
            for e in np.eye(n)
        ],
        axis=1,
    )
    lay = spec.layout
    a = np.zeros((n, d))
    a[:, slice(*lay.target)] = jac.T * kp
    a[:, slice(*lay.end_effector)] = -jac.T * kp
    a[:, slice(*lay.joint_velocity)] = -kd * np.eye(n)
    a /= tau[:, None]
    c = kin.gravity_torque(home) / tau
    norm = base.manifest.normalizer
    mean = np.asarray(norm.mean)
    std = np.sqrt(np.asarray(norm.var) + norm.epsilon)
    w, b = a * std[None, :], a @ mean + c
    eye = np.eye(d)
    state = {
        "trunk.0.weight": torch.tensor(np.vstack([eye, -eye]), dtype=torch.float32),
        "trunk.0.bias": torch.zeros(hidden),
        "trunk.2.weight": torch.eye(hidden),
        "trunk.2.bias": torch.zeros(hidden),
        "head.mu.weight": torch.tensor(np.hstack([w, -w]), dtype=torch.float32),
        "head.mu.bias": torch.tensor(b, dtype=torch.float32),
        "head.log_std.weight": torch.zeros(n, hidden),
        "head.log_std.bias": torch.full((n,), -2.0),
    }
    return save_derived_bundle(
        base_dir / "reach", base, actor_state=state, version_id=2, version_name="reach"
    )


def outcomes(
    version: int,
    n: int,
    *,
    mean_return: float,
    success: float,
    rate: float,
    seed: int,
    tightened: bool = False,
    distance_m: float = 0.05,
    tasks: bool = False,
) -> list[EpisodeOutcome]:
    """``n`` recorded episodes of ``version`` with the given averages (200 steps each);
    ``tightened``: served under a canary's limits (the canary's and its control's);
    ``tasks``: episode k declares task ``task-k`` (so two such lists pair up)."""
    rng = np.random.default_rng(seed)
    return [
        EpisodeOutcome(
            version=version,
            episode_return=float(rng.normal(mean_return, 5.0)),
            success=bool(rng.random() < success),
            steps=200,
            interventions=int(rng.binomial(200, rate)),
            backups=0,
            tightened=tightened,
            trial=int(tightened),
            task_id=f"task-{k}" if tasks else "",
            final_distance_m=abs(float(rng.normal(distance_m, 0.01))),
        )
        for k in range(n)
    ]


# The simulation stage in these tests: few episodes, wide margins.
SIM_STAGE = SimulationStageConfig(episodes=4, success_margin=0.5)


def measure(verdict: StageVerdict, name: str) -> float:
    """The value of ``verdict``'s measurement ``name``."""
    return {m.name: m.value for m in verdict.measurements}[name]
