"""ArmDynamics and DomainRandomization: valid values only, samples inside their ranges."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from hypothesis import given, strategies as st
from pydantic import ValidationError

from tether.sim import ArmDynamics, DomainRandomization, SimConfigError
from tether.sim.dynamics import apply_dynamics
from tether.sim.geometry import ARM
from tether.sim.mjcf import PAYLOAD_BODY, build_model


def test_apply_dynamics_writes_every_physical_knob_into_the_model() -> None:
    model = build_model()
    apply_dynamics(
        model,
        ArmDynamics(actuator_gain=0.7, joint_damping=2.0, joint_friction=3.0, payload_mass_kg=0.4),
    )
    np.testing.assert_allclose(
        model.actuator_gear[:, 0], [0.7 * link.torque_limit_nm for link in ARM.links]
    )
    np.testing.assert_allclose(model.dof_damping, [2.0 * link.damping_nm_s for link in ARM.links])
    np.testing.assert_allclose(
        model.dof_frictionloss, [3.0 * link.friction_nm for link in ARM.links]
    )
    body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, PAYLOAD_BODY)
    assert model.body_mass[body] == 0.4


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"actuator_gain": 0.0}, "actuator_gain must be > 0"),
        ({"joint_damping": -1.0}, "joint_damping must be >= 0"),
        ({"payload_mass_kg": float("nan")}, "payload_mass_kg must be finite"),
        ({"action_delay_steps": 1.5}, "whole number"),
        ({"action_delay_steps": 11}, "between 0 and 10"),
    ],
)
def test_unusable_dynamics_are_refused(kwargs: dict[str, float], fragment: str) -> None:
    with pytest.raises(SimConfigError, match=fragment):
        ArmDynamics(**kwargs)  # type: ignore[arg-type]


def _range(lo: float, hi: float) -> st.SearchStrategy[tuple[float, float]]:
    return st.tuples(st.floats(lo, hi), st.floats(lo, hi)).map(lambda t: (min(t), max(t)))


@given(
    gain=_range(0.1, 2.0),
    damping=_range(0.0, 3.0),
    friction=_range(0.0, 5.0),
    payload=_range(0.0, 1.0),
    noise=_range(0.0, 0.05),
    bias=_range(-0.1, 0.1),
    delay=st.tuples(st.integers(0, 10), st.integers(0, 10)).map(lambda t: (min(t), max(t))),
    seed=st.integers(0, 2**32 - 1),
)
def test_samples_always_lie_inside_their_ranges(
    gain: tuple[float, float],
    damping: tuple[float, float],
    friction: tuple[float, float],
    payload: tuple[float, float],
    noise: tuple[float, float],
    bias: tuple[float, float],
    delay: tuple[int, int],
    seed: int,
) -> None:
    ranges = DomainRandomization(
        actuator_gain=gain,
        joint_damping=damping,
        joint_friction=friction,
        payload_mass_kg=payload,
        obs_noise_std=noise,
        obs_bias=bias,
        action_delay_steps=delay,
    )
    rng = np.random.default_rng(seed)
    for _ in range(5):
        assert ranges.contains(ranges.sample(rng))


def test_default_randomization_varies_and_bad_ranges_are_refused() -> None:
    ranges = DomainRandomization.default()
    rng = np.random.default_rng(0)
    draws = [ranges.sample(rng) for _ in range(50)]
    assert len({d.actuator_gain for d in draws}) == 50
    assert all(ranges.contains(d) for d in draws)
    assert DomainRandomization().sample(rng) == ArmDynamics.nominal()
    with pytest.raises(ValidationError, match="low <= high"):
        DomainRandomization(actuator_gain=(1.2, 0.8))
    with pytest.raises(ValidationError, match="actuator_gain must be > 0"):
        DomainRandomization(actuator_gain=(0.0, 1.0))
