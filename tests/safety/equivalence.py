"""Inputs that exercise every branch of ``Supervisor.filter``, and a side-by-side driver.

The optimized supervisor must decide exactly what the straightforward reference
(``ReferenceSupervisor`` in ``reference.py``) decides: the same float32 bytes and the same verdict on
every call, including the state both carry from call to call (the gravity hold, the
load estimate). ``open_loop_steps`` draws varied single calls (random, at and beyond
the joint limits, near the obstacle and the workspace walls, NaN/±Inf, stale, wrong
shapes, unusable previous actions); ``closed_loop_compare`` runs both supervisors on
the MuJoCo arm, optionally drifting, feeding back what they executed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np

from safety.reference import ReferenceSupervisor
from tether.safety import SafetyLimits, SafetyVerdict, Supervisor
from tether.safety.kinematics import Kinematics
from tether.sim import ArmEnv

AnySupervisor = Supervisor | ReferenceSupervisor


class Call(NamedTuple):
    """One supervisor call: ``backup`` calls ``backup_action`` instead of ``filter``."""

    observation: Any
    proposed: Any
    previous: Any
    age_s: float | None
    backup: bool


def invoke(supervisor: AnySupervisor, call: Call) -> tuple[np.ndarray, SafetyVerdict]:
    if call.backup:
        return supervisor.backup_action(call.observation, call.previous)
    return supervisor.filter(
        call.observation, call.proposed, call.previous, observation_age_s=call.age_s
    )


def same(a: tuple[np.ndarray, SafetyVerdict], b: tuple[np.ndarray, SafetyVerdict]) -> str | None:
    """None when both results are identical to the bit, else what differs."""
    (ua, va), (ub, vb) = a, b
    if ua.dtype != ub.dtype or ua.shape != ub.shape or ua.tobytes() != ub.tobytes():
        return f"actions differ: {ua!r} vs {ub!r}"
    if (va.source, int(va.checks), va.joints) != (vb.source, int(vb.checks), vb.joints):
        return f"verdicts differ: {va} vs {vb}"
    if np.float64(va.correction_norm).tobytes() != np.float64(vb.correction_norm).tobytes():
        return f"correction norms differ: {va.correction_norm!r} vs {vb.correction_norm!r}"
    return None


def compare(fast: Supervisor, reference: AnySupervisor, calls: Iterable[Call]) -> int:
    """Feed the same calls to both, in order; the number compared (asserts on a mismatch)."""
    count = 0
    for i, call in enumerate(calls):
        diff = same(invoke(fast, call), invoke(reference, call))
        assert diff is None, f"call {i} ({call}): {diff}"
        count += 1
    return count


def _state(limits: SafetyLimits, size: int, q: np.ndarray, v: np.ndarray) -> np.ndarray:
    obs = np.zeros(size, dtype=np.float32)
    obs[slice(*limits.layout.joint_position)] = q
    obs[slice(*limits.layout.joint_velocity)] = v
    return obs


def _near_clearance(
    kinematics: Kinematics,
    limits: SafetyLimits,
    rng: np.random.Generator,
    lo: np.ndarray,
    hi: np.ndarray,
) -> np.ndarray:
    """A pose whose arm comes within 0.15 m of an obstacle or a workspace wall (or the
    last of 50 tries)."""
    walls = limits.workspace
    q = rng.uniform(lo, hi)
    for _ in range(50):
        q = rng.uniform(lo, hi)
        centers, radii = kinematics.collision_spheres(q)
        for obstacle in limits.obstacles:
            center = np.asarray(getattr(obstacle, "center", np.zeros(3)))
            if np.min(np.linalg.norm(np.asarray(centers) - center, axis=1) - radii) < 0.15:
                return q
        if walls is not None:
            ee = np.asarray(kinematics.end_effector(q))
            if min(np.min(ee - walls.low), np.min(np.asarray(walls.high) - ee)) < 0.15:
                return q
    return q


def open_loop_steps(
    limits: SafetyLimits,
    obs_size: int,
    rng: np.random.Generator,
    count: int,
    kinematics: Kinematics | None = None,
) -> list[Call]:
    """``count`` varied calls for a supervisor of ``limits``. Previous actions are drawn
    independently (random, None, unusable); the load estimate, which needs the
    supervisor's own stop fed back, is covered by ``closed_loop_compare``."""
    n = limits.n_joints
    lo = np.asarray(limits.position_low_rad)
    hi = np.asarray(limits.position_high_rad)
    vmax = np.asarray(limits.velocity_limit_rad_s)
    calls: list[Call] = []
    for _ in range(count):
        kind = rng.integers(0, 10)
        if kind <= 2 or (kind == 3 and kinematics is None):
            q = rng.uniform(lo, hi)
            v = rng.uniform(-1.2, 1.2, n) * vmax
        elif kind == 3:
            assert kinematics is not None
            q = _near_clearance(kinematics, limits, rng, lo, hi)
            v = rng.uniform(-1.0, 1.0, n) * vmax
        elif kind == 4:
            # At or beyond a limit, often moving toward it.
            side = rng.integers(0, 2, n)
            q = np.where(side, hi, lo) + rng.uniform(-0.15, 0.05, n) * np.where(side, 1, -1)
            v = rng.uniform(-0.2, 1.5, n) * vmax * np.where(side, 1, -1)
        elif kind == 5:
            q = rng.uniform(lo, hi)
            v = np.zeros(n)
        else:
            q = rng.uniform(lo, hi)
            v = rng.uniform(-0.5, 0.5, n) * vmax
        obs: Any = _state(limits, obs_size, q, v)
        r = rng.random()
        if r < 0.02:
            obs[int(rng.integers(0, 2 * n))] = np.nan
        elif r < 0.03:
            obs = obs[:-1]
        elif r < 0.04:
            obs = "not numbers"
        scale = [0.05, 1.0, 1.0, 3.0][int(rng.integers(0, 4))]
        proposed: Any = rng.uniform(-scale, scale, n).astype(np.float32)
        r = rng.random()
        if r < 0.03:
            proposed[int(rng.integers(0, n))] = [np.nan, np.inf, -np.inf][int(rng.integers(0, 3))]
        elif r < 0.05:
            proposed = proposed[:-1]
        elif r < 0.06:
            proposed = [1e300] * n
        elif r < 0.08:
            proposed = proposed.astype(np.float64)
        r = rng.random()
        previous: Any = None
        if r < 0.5:
            previous = rng.uniform(-1.0, 1.0, n).astype(np.float32)
        elif r < 0.55:
            previous = np.full(n, np.nan)
        elif r < 0.6:
            previous = np.zeros(n + 1)
        age = (
            None if rng.random() < 0.7 else float(rng.uniform(0.0, 2 * limits.command_staleness_s))
        )
        calls.append(Call(obs, proposed, previous, age, bool(rng.random() < 0.03)))
    return calls


def closed_loop_compare(
    fast: Supervisor,
    reference: AnySupervisor,
    env: ArmEnv,
    steps: int,
    seed: int,
    *,
    record: Callable[[Call, tuple[np.ndarray, SafetyVerdict]], None] | None = None,
) -> int:
    """A random policy on ``env`` through both supervisors, executing what they agree on."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset()
    previous: np.ndarray | None = None
    for i in range(steps):
        proposed = rng.uniform(-1.0, 1.0, env.robot_spec.act_dim).astype(np.float32)
        call = Call(obs, proposed, previous, None, False)
        result = invoke(fast, call)
        diff = same(result, invoke(reference, call))
        assert diff is None, f"step {i} ({call}): {diff}"
        if record is not None:
            record(call, result)
        previous = result[0]
        obs, _, terminated, truncated, _ = env.step(previous)
        if terminated or truncated:
            obs, _ = env.reset()
            previous = None
    return steps
