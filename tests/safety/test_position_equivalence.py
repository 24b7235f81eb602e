"""The position supervisor's compiled path decides exactly what its Python path decides.

Both paths (``PositionSupervisor(..., compiled=True)`` and ``compiled=False``, see
``tether.safety.position.kernel``) run side by side on the same inputs, each keeping its
own state, and every call must give the same float32 bytes and the same verdict (source,
check bits, correction, joints, how far each check moved the command). What the Python
path decides is pinned by the recorded corpus (``test_position_corpus.py``). Inputs: tens of thousands of
random calls in sequences (random states, commands near and far, at and beyond the
limits, NaN/±Inf/huge, wrong shapes and types, previous commands handed back, made up
or unusable, stale observations, takeovers, unreadable observations, a switch of
degradation level handing the state across), and closed loops on the MuJoCo arm: a
random-target policy and the shipped position policy, through the action-space
supervisor that serving runs.

Observations are built through the spec's layout slices, so a slot added to the arm's
observation does not change what the supervisors read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.safety.position_corpus import random_target_policy
from tests.safety.random_commands import ARMS, random_command_run
from tether.safety import SafetyVerdict
from tether.safety.for_spec import limits_for, supervisor_for
from tether.safety.position import PositionSupervisor, PositionSupervisorConfig, kernel
from tether.safety.position.actions import PositionActionSupervisor
from tether.safety.position.presets import arm_impedance, arm_position_limits
from tether.sim import ArmEnv, ArmEnvConfig, ArmKinematics, arm_spec

SPEC = arm_spec("position")
N = SPEC.n_joints
Q = slice(*SPEC.layout.joint_position)
V = slice(*SPEC.layout.joint_velocity)
LIMITS = arm_position_limits()
TIGHT = LIMITS.tightened(0.5)
LOW = np.asarray(LIMITS.position_low_rad)
HIGH = np.asarray(LIMITS.position_high_rad)
VMAX = np.asarray(LIMITS.velocity_limit_rad_s)
KINEMATICS = ArmKinematics(SPEC)

pytestmark = pytest.mark.skipif(not kernel.AVAILABLE, reason="numba (the compiled path) is absent")


def python_path(limits: Any) -> PositionSupervisor:
    """The Python path, the reference the compiled path is held to."""
    return PositionSupervisor(limits, arm_impedance(), kinematics=KINEMATICS, compiled=False)


WEIRD = (np.nan, np.inf, -np.inf, 1e30, -1e30, 3.4e38, 1e300, 7.0, -7.0)


def observation(q: Any, v: Any) -> np.ndarray:
    out = np.zeros(SPEC.obs_dim, dtype=np.float32)
    out[Q] = q
    out[V] = v
    return out


def same(a: tuple[np.ndarray, SafetyVerdict], b: tuple[np.ndarray, SafetyVerdict]) -> bool:
    (x, vx), (y, vy) = a, b
    return (
        type(x) is type(y)
        and x.dtype == y.dtype
        and x.shape == y.shape
        and x.tobytes() == y.tobytes()
        and type(vx) is type(vy)
        and vx.source == vy.source
        and int(vx.checks) == int(vy.checks)
        and (
            vx.correction_norm == vy.correction_norm
            or (math.isnan(vx.correction_norm) and math.isnan(vy.correction_norm))
        )
        and vx.joints == vy.joints
        and getattr(vx, "moved_rad", ()) == getattr(vy, "moved_rad", ())
    )


def pair(limits: Any) -> tuple[PositionSupervisor, PositionSupervisor]:
    impedance = arm_impedance()
    return (
        PositionSupervisor(limits, impedance, kinematics=KINEMATICS, compiled=True),
        python_path(limits),
    )


def random_state(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    widen = rng.choice([0.0, 0.0, 0.0, 0.05, 0.6])
    q = rng.uniform(LOW - widen, HIGH + widen)
    # Mostly plausible speeds; now and then one no real arm reaches (an unreadable state).
    speed = rng.choice([0.0, 0.0, 0.01, 0.05, 0.3, 0.8, 1.2, 1.2, 1.2, 6.0])
    v = rng.uniform(-1.0, 1.0, N) * VMAX * speed
    return q, v


def random_command(rng: np.random.Generator, q: np.ndarray, last: Any) -> Any:
    kind = rng.integers(12)
    if kind <= 3:  # a small step from the pose or the last command: often passes
        base = q if last is None or rng.random() < 0.3 else np.asarray(last, dtype=np.float64)
        return (base + rng.normal(0.0, rng.choice([0.0, 1e-5, 1e-4, 3e-3, 0.03]), N)).astype(
            np.float32
        )
    if kind == 4:
        return rng.uniform(LOW - 0.5, HIGH + 0.5).astype(np.float32)
    if kind == 5:  # at or just beyond a joint's end
        out = np.where(rng.random(N) < 0.5, LOW, HIGH) + rng.normal(0.0, 0.05, N)
        return out.astype(np.float32)
    if kind == 6:
        out = q.astype(np.float32).copy()
        out[rng.integers(N)] = rng.choice(WEIRD)
        return out
    if kind == 7:  # another dtype, a list, a huge float64
        out = q + rng.normal(0.0, 0.02, N)
        if rng.random() < 0.3:
            out[rng.integers(N)] = 1e300
        return out.tolist() if rng.random() < 0.5 else out
    if kind == 8:  # wrong shapes and types
        return rng.choice(
            np.array(
                [np.zeros(N + 1, np.float32), np.zeros((1, N), np.float32), "abc", None, 3.0],
                dtype=object,
            )
        )
    if kind == 9 and last is not None:  # the last command handed back as the proposal
        return np.array(last, dtype=np.float32)
    return rng.uniform(LOW, HIGH).astype(np.float32)


def random_previous(rng: np.random.Generator, last: Any, q: np.ndarray) -> Any:
    kind = rng.integers(10)
    if kind <= 5:
        return last  # handed back (None on the first step)
    if kind == 6:
        return None
    if kind == 7 and last is not None:
        return np.asarray(last, dtype=np.float64).tolist()  # the same values, another type
    if kind == 8:
        out = (q + rng.normal(0.0, 0.05, N)).astype(np.float32)
        if rng.random() < 0.3:
            out[rng.integers(N)] = rng.choice(WEIRD)
        return out
    return rng.uniform(LOW - 0.3, HIGH + 0.3).astype(np.float32)


def random_observation(rng: np.random.Generator, q: np.ndarray, v: np.ndarray) -> Any:
    obs = observation(q, v)
    kind = rng.integers(80)
    if kind == 0:
        obs[rng.integers(2 * N)] = rng.choice(WEIRD)
    elif kind == 1:
        return obs[:-1]
    elif kind == 2:
        return obs.astype(np.float64)
    elif kind == 3:
        return obs.tolist()
    elif kind == 4:
        return "not an observation"
    return obs


@np.errstate(over="ignore")  # huge values cast to float32 become ±inf, on purpose
def test_random_sequences_match_the_python_path() -> None:
    rng = np.random.default_rng(20261202)
    calls = 0
    for sequence in range(250):
        (live, python), (live_t, python_t) = pair(LIMITS), pair(TIGHT)
        last_live: Any = None
        last_python: Any = None
        near = rng.random() < 0.5  # consecutive states, as a served robot sends
        q, v = random_state(rng)
        tight = False
        for _ in range(80):
            if near:
                q = q + v * LIMITS.control_period_s + rng.normal(0.0, 0.01, N)
                q = np.clip(q, LOW - 0.1, HIGH + 0.1)
                v = np.clip(v + rng.normal(0.0, 0.3, N), -1.2 * VMAX, 1.2 * VMAX)
            else:
                q, v = random_state(rng)
            if rng.random() < 0.03:  # a change of degradation level hands the state on
                tight = not tight
                (live_t if tight else live).take_state(live_t if not tight else live)
                (python_t if tight else python).take_state(python_t if not tight else python)
            a, b = (live_t, python_t) if tight else (live, python)
            obs = random_observation(rng, q, v)
            command = random_command(rng, q, last_python)
            previous = random_previous(rng, last_python, q)
            previous_live = last_live if previous is last_python else previous
            age = rng.choice([None] * 14 + [0.0, 0.01, 0.05, 0.5, np.nan])
            if rng.random() < 0.04:
                got = a.backup_action(obs, previous_live)
                want = b.backup_action(obs, previous)
            else:
                got = a.filter(obs, command, previous_live, observation_age_s=age)
                want = b.filter(obs, command, previous, observation_age_s=age)
            assert same(got, want), (sequence, obs, command, previous, age, got, want)
            last_live, last_python = got[0], want[0]
            calls += 1
    assert calls == 20_000


def closed_loop(
    policy: Callable[[np.ndarray, int], np.ndarray], episodes: int, limits_factor: float = 1.0
) -> int:
    """The action-space supervisors side by side on the MuJoCo arm (the Python path's
    action executed); the number of steps compared."""
    limits = limits_for(SPEC)
    if limits_factor != 1.0:
        limits = limits.tightened(limits_factor)
    env = ArmEnv(seed=0, config=ArmEnvConfig(command_interface="position"))
    steps = 0
    for episode in range(episodes):
        live = supervisor_for(SPEC, limits)
        assert isinstance(live, PositionActionSupervisor)
        assert live.position.compiled  # supervisor_for builds the compiled path
        python = PositionActionSupervisor(python_path(limits), SPEC)
        obs, _ = env.reset(seed=episode)
        previous_live: np.ndarray | None = None
        previous_python: np.ndarray | None = None
        for step in range(env.config.episode_steps):
            action = policy(obs, step)
            got = live.filter(obs, action, previous_live)
            want = python.filter(obs, action, previous_python)
            assert same(got, want), (episode, step, obs, action, got, want)
            previous_live, previous_python = got[0], want[0]
            obs, _, terminated, truncated, _ = env.step(want[0])
            steps += 1
            if terminated or truncated:
                break
    return steps


@pytest.mark.parametrize("limits_factor", [1.0, 0.5])
def test_random_target_closed_loop_matches(limits_factor: float) -> None:
    policy = random_target_policy(np.random.default_rng(7))
    assert closed_loop(policy, episodes=8, limits_factor=limits_factor) > 1000


def test_shipped_policy_closed_loop_matches() -> None:
    import torch

    from tether.assets import load_pretrained_bundle
    from tether.policy import EngineConfig, PolicyEngine

    torch.set_num_threads(1)
    engine = PolicyEngine(
        load_pretrained_bundle(command_interface="position"), EngineConfig(execution="eager")
    )
    rng = np.random.default_rng(3)

    def policy(obs: np.ndarray, step: int) -> np.ndarray:
        deterministic = step % 3 != 0 or rng.random() < 0.5
        return engine.act(obs[None].astype(np.float32), deterministic).actions[0]

    # Episodes end once the arm settles (ArmEnvConfig.end_when_settled): ~120 steps each.
    assert closed_loop(policy, episodes=10) > 1000


def test_tiny_segments_match_the_python_path() -> None:
    """Segments a denormal long (a joint at 1e-30 commanded to 0): the sweep's sample
    ratios pass any int64, which Python's integers absorb and the kernel must clamp."""
    rng = np.random.default_rng(11)
    for _ in range(20):
        live, python = pair(LIMITS)
        q = rng.uniform(LOW, HIGH)
        last_live: Any = None
        last_python: Any = None
        for step in range(12):
            q_now = q.copy()
            q_now[step % N] = 1e-30 if step % 2 else 0.0
            obs = observation(q_now, np.zeros(N))
            command = q_now.astype(np.float32)
            command[(step + 1) % N] = np.float32(1e-38) if step % 3 else np.float32(0.0)
            got = live.filter(obs, command, last_live)
            want = python.filter(obs, command, last_python)
            assert same(got, want), (step, got, want)
            last_live, last_python = got[0], want[0]


class _SideBySide:
    """Both paths on the same calls, as ``random_command_run``'s supervisor: each call's
    results compared, the Python path's returned."""

    def __init__(self, way_out: bool) -> None:
        config = PositionSupervisorConfig(way_out=way_out)
        self.paths = [
            PositionActionSupervisor(
                PositionSupervisor(
                    limits_for(SPEC),
                    arm_impedance(),
                    kinematics=KINEMATICS,
                    config=config,
                    compiled=compiled,
                ),
                SPEC,
            )
            for compiled in (True, False)
        ]
        self.calls = 0

    def filter(self, obs: Any, action: Any, previous: Any) -> tuple[np.ndarray, SafetyVerdict]:
        got, want = (path.filter(obs, action, previous) for path in self.paths)
        assert same(got, want), (self.calls, obs, action, previous, got, want)
        self.calls += 1
        return want


@pytest.mark.parametrize("way_out", [True, False])
def test_a_hand_run_matches_with_the_way_out_on_and_off(way_out: bool) -> None:
    """Drifted seed 29 with a hand (the arm left deep inside the obstacle's margin, where
    the way out acts): both paths decide alike, the way out taken or not."""
    both = _SideBySide(way_out)
    random_command_run(ARMS["drifted"], both, 2000, seed=29, hand=0.4)  # type: ignore[arg-type]
    assert both.calls == 2000
