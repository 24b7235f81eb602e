"""DriftSchedule: the right dynamics at the right global step, and a demo beyond pretraining."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st
from pydantic import ValidationError

from tether.sim import ArmDynamics, ArmEnv, DomainRandomization, DriftRamp, DriftSchedule
from tether.sim.geometry import ARM

NOMINAL = ArmDynamics.nominal()


def test_ramps_interpolate_and_step_changes_switch_exactly() -> None:
    drift = DriftSchedule(
        ramps=(
            DriftRamp(knob="actuator_gain", start_step=100, end_step=200, to_value=0.6),
            DriftRamp(knob="payload_mass_kg", start_step=150, end_step=150, to_value=0.4),
        )
    )
    assert drift.dynamics_at(0, NOMINAL) == NOMINAL
    assert drift.dynamics_at(100, NOMINAL).actuator_gain == 1.0
    assert drift.dynamics_at(150, NOMINAL).actuator_gain == pytest.approx(0.8)
    assert drift.dynamics_at(149, NOMINAL).payload_mass_kg == 0.0
    assert drift.dynamics_at(150, NOMINAL).payload_mass_kg == 0.4
    assert drift.dynamics_at(10_000, NOMINAL).actuator_gain == 0.6
    assert drift.last_step == 200


def test_consecutive_ramps_on_one_knob_chain_and_overlaps_are_refused() -> None:
    drift = DriftSchedule(
        ramps=(
            DriftRamp(knob="joint_friction", start_step=50, end_step=60, to_value=1.0),
            DriftRamp(knob="joint_friction", start_step=0, end_step=10, to_value=3.0),
        )
    )
    assert drift.dynamics_at(30, NOMINAL).joint_friction == 3.0
    assert drift.dynamics_at(55, NOMINAL).joint_friction == pytest.approx(2.0)
    with pytest.raises(ValidationError, match="overlap"):
        DriftSchedule(
            ramps=(
                DriftRamp(knob="obs_bias", start_step=0, end_step=10, to_value=0.1),
                DriftRamp(knob="obs_bias", start_step=5, end_step=20, to_value=0.2),
            )
        )
    with pytest.raises(ValidationError, match="end_step"):
        DriftRamp(knob="obs_bias", start_step=10, end_step=5)
    with pytest.raises(ValidationError, match="actuator_gain must be > 0"):
        DriftSchedule(ramps=(DriftRamp(knob="actuator_gain", to_value=0.0),))


@given(
    start=st.integers(0, 1000),
    length=st.integers(0, 1000),
    to=st.floats(0.0, 5.0),
    step=st.integers(0, 3000),
)
def test_a_ramp_stays_between_where_it_starts_and_where_it_goes(
    start: int, length: int, to: float, step: int
) -> None:
    drift = DriftSchedule(
        ramps=(
            DriftRamp(knob="joint_damping", start_step=start, end_step=start + length, to_value=to),
        )
    )
    value = drift.dynamics_at(step, NOMINAL).joint_damping
    assert min(1.0, to) - 1e-12 <= value <= max(1.0, to) + 1e-12
    if step >= start + length:
        assert value == to


def test_demo_lies_beyond_pretraining_randomization_but_inside_the_rated_envelope() -> None:
    pretraining = DomainRandomization.default()
    drift = DriftSchedule.demo(start_step=100, ramp_steps=400)
    worn = drift.dynamics_at(drift.last_step, NOMINAL)
    for knob in ("actuator_gain", "joint_friction", "payload_mass_kg", "action_delay_steps"):
        low, high = getattr(pretraining, knob)
        assert not low <= getattr(worn, knob) <= high, knob
    assert not pretraining.contains(worn)
    assert worn.actuator_gain >= ARM.rated_min_actuator_gain
    assert worn.payload_mass_kg <= ARM.rated_max_payload_kg
    assert drift.dynamics_at(99, NOMINAL) == NOMINAL


def test_env_applies_drift_by_global_step_across_episodes() -> None:
    drift = DriftSchedule.demo(start_step=30, ramp_steps=100)
    env = ArmEnv(drift=drift, seed=0)
    seen: list[ArmDynamics] = []
    env.reset()
    for _ in range(3):
        for _ in range(60):
            *_, info = env.step(np.zeros(4, dtype=np.float32))
            seen.append(info["dynamics"])
        env.reset()
    # The dynamics reported for step k were applied during step k (global step k-1).
    for k, dynamics in enumerate(seen):
        assert dynamics == drift.dynamics_at(k, NOMINAL)
    assert seen[29] == NOMINAL
    assert seen[80].payload_mass_kg == ARM.rated_max_payload_kg
    assert seen[-1].action_delay_steps == 1
    assert env.global_step == 180
