"""decide_batch: one engine batch of sessions supervised in one call, bit for bit as
one decide call per session (levels, canary tightening, TAKEOVER, degradation events)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.safety.test_position_equivalence import same
from tether.safety.degradation import DegradationMachine
from tether.safety.degradation_config import DegradationConfig, LevelThresholds
from tether.safety.for_spec import limits_for
from tether.safety.levels import DegradationLevel
from tether.serving.supervision import (
    ARRAY_ROWS,
    SessionSupervisor,
    SupervisedRow,
    SupervisorFactory,
    decide_batch,
)
from tether.sim import arm_spec

SPEC = arm_spec("position")
Q = slice(*SPEC.layout.joint_position)
V = slice(*SPEC.layout.joint_velocity)


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


# Thresholds these few steps reach, so the batch's degradation events can be compared.
EVENTFUL = DegradationConfig(
    min_window_steps=5,
    restricted=LevelThresholds(intervention_rate=0.6, backup_action_rate=0.1),
    paused=LevelThresholds(intervention_rate=0.8, backup_action_rate=0.2),
    takeover=LevelThresholds(intervention_rate=0.95, backup_action_rate=0.3),
)


def fleet(rows: int, machines: int = 1) -> tuple[list[DegradationMachine], list[SessionSupervisor]]:
    """Sessions of ``rows`` robots, robot ``i`` reporting to machine ``i % machines``."""
    made = [
        DegradationMachine(EVENTFUL, limits=limits_for(SPEC), clock=Clock())
        for _ in range(machines)
    ]
    factories = [SupervisorFactory(SPEC, degradation=m) for m in made]
    return made, [factories[i % machines](f"robot-{i}") for i in range(rows)]


@np.errstate(over="ignore")
@pytest.mark.parametrize("stacked", [False, True])
@pytest.mark.parametrize("machines", [1, 2])
@pytest.mark.parametrize("rows", [48, ARRAY_ROWS - 1])
def test_a_batch_decides_as_one_call_per_session(machines: int, rows: int, stacked: bool) -> None:
    """Row for row, and the same degradation events in the same order, whether the
    batch's sessions share one degradation machine (one observe_batch) or not, on the
    array path (48 rows) and row by row (a small batch), the observations handed as rows
    or also as the engine's one array (``stacked``)."""
    rng = np.random.default_rng(5)
    machines_a, singles = fleet(rows, machines)
    machines_b, batched = fleet(rows, machines)
    low, high = np.asarray(SPEC.joint_position_low_rad), np.asarray(SPEC.joint_position_high_rad)
    q = rng.uniform(low, high, (rows, 4))
    v = np.zeros((rows, 4))
    last_a: list[Any] = [None] * rows
    last_b: list[Any] = [None] * rows
    levels = [DegradationLevel.NORMAL] * 6 + [
        DegradationLevel.RESTRICTED,
        DegradationLevel.TAKEOVER,
    ]
    for step in range(30):
        q = np.clip(q + v * 0.02 + rng.normal(0.0, 0.01, q.shape), low, high)
        v = np.clip(v + rng.normal(0.0, 0.3, v.shape), -2.0, 2.0)
        obs = np.zeros((rows, SPEC.obs_dim), np.float32)
        obs[:, Q], obs[:, V] = q, v
        proposed = rng.uniform(-1.1, 1.1, (rows, 4)).astype(np.float32)
        proposed[rng.random(rows) < 0.03, 0] = np.nan
        level = [levels[int(rng.integers(len(levels)))] for _ in range(rows)]
        tightening = [0.8 if rng.random() < 0.2 else 1.0 for _ in range(rows)]
        ages = [0.0 if rng.random() < 0.95 else 0.5 for _ in range(rows)]
        want = [
            singles[i].decide(
                obs[i],
                proposed[i],
                last_a[i],
                observation_age_s=ages[i],
                level=level[i],
                policy_version=3,
                tightening=tightening[i],
            )
            for i in range(rows)
        ]
        got = decide_batch(
            [
                SupervisedRow(batched[i], obs[i], last_b[i], ages[i], level[i], tightening[i])
                for i in range(rows)
            ],
            proposed,
            policy_version=3,
            observations=obs if stacked else None,
        )
        for i in range(rows):
            assert same(got[i], want[i]), (step, i, got[i], want[i])
        last_a = [w[0] for w in want]
        last_b = [g[0] for g in got]
    for machine_a, machine_b in zip(machines_a, machines_b, strict=True):
        assert machine_a.robot_levels() == machine_b.robot_levels()
        # The same degradation events, in the same order (and some happened).
        assert machine_a.history() == machine_b.history()
        assert len(machine_b.history()) >= (5 if rows == 48 else 1)


@pytest.mark.parametrize("stacked", [False, True])
def test_serving_batches_compile_nothing_after_the_factory_warmed_the_kernel(
    stacked: bool,
) -> None:
    """A compile at the first large batch would stall every robot in it (seconds on a
    fresh install): the factory's warm-up covers the array path's argument layouts."""
    from tether.safety.position import kernel

    if not kernel.AVAILABLE:
        pytest.skip("the compiled kernel is off here")
    _, sessions = fleet(ARRAY_ROWS + 2)  # the factory warms the kernel
    compiled = {
        name: len(getattr(kernel, name).signatures)
        for name in ("step_batch", "targets_batch", "filter_batch", "step")
    }
    rng = np.random.default_rng(2)
    rows = len(sessions)
    low, high = np.asarray(SPEC.joint_position_low_rad), np.asarray(SPEC.joint_position_high_rad)
    last: list[Any] = [None] * rows
    for _ in range(3):
        obs = np.zeros((rows, SPEC.obs_dim), np.float32)
        obs[:, Q] = rng.uniform(low, high, (rows, 4))
        proposed = rng.uniform(-1.0, 1.0, (rows, 4)).astype(np.float32)
        got = decide_batch(
            [
                SupervisedRow(sessions[i], obs[i], last[i], 0.0, DegradationLevel.NORMAL)
                for i in range(rows)
            ],
            proposed,
            policy_version=1,
            observations=obs if stacked else None,
        )
        last = [g[0] for g in got]
    assert {name: len(getattr(kernel, name).signatures) for name in compiled} == compiled
