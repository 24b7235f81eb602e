"""The exact one-step response against a fine numerical integration of the same model."""

from __future__ import annotations

import math

from hypothesis import given, strategies as st

from tether.safety.response import step_response

DT = 0.02


def _integrate(v: float, push: float, gain: float, damping: float, substeps: int = 4000) -> float:
    """q̈ = G·(p − c·q̇) over one step, by classical Runge-Kutta."""
    h = DT / substeps

    def f(x: float) -> float:
        return gain * (push - damping * x)

    for _ in range(substeps):
        k1 = f(v)
        k2 = f(v + 0.5 * h * k1)
        k3 = f(v + 0.5 * h * k2)
        k4 = f(v + h * k3)
        v += h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    return v


@given(
    v=st.floats(-5.0, 5.0),
    push=st.floats(-2.0, 2.0),
    gain=st.floats(1.0, 3000.0),
    damping=st.floats(0.0, 0.5),
)
def test_the_response_is_the_models_exact_solution_and_never_passes_the_steady_speed(
    v: float, push: float, gain: float, damping: float
) -> None:
    r = step_response([gain], [damping], DT)
    v_next = v * r.decay[0] + push * r.velocity_per_push[0]
    assert math.isclose(v_next, _integrate(v, push, gain, damping), rel_tol=1e-6, abs_tol=1e-6)
    if r.decay[0] < 1.0:
        steady = push / damping
        assert min(v, steady) - 1e-9 <= v_next <= max(v, steady) + 1e-9
    # The inverse: the push that reaches v_next from v.
    back = (v_next - v * r.decay[0]) * r.per_velocity[0]
    assert math.isclose(back, push, rel_tol=1e-6, abs_tol=1e-6)


@given(gain=st.floats(1.0, 3000.0))
def test_without_damping_it_is_the_undamped_model_to_the_bit(gain: float) -> None:
    r = step_response([gain], [0.0], DT)
    assert r.decay == (1.0,)
    assert r.per_velocity == (1.0 / (gain * DT),)
    assert r.velocity_per_push == (gain * DT,)


def test_explicit_euler_would_overshoot_where_the_exact_form_does_not() -> None:
    # The arm's wrist at the fastest gain: G·c·dt above 3, where one Euler step from
    # rest jumps past the steady speed (and the next one back): the exact form cannot.
    gain, damping = 2130.0, 0.09
    push = 1.0
    euler = 0.0 + DT * gain * (push - damping * 0.0)
    r = step_response([gain], [damping], DT)
    assert euler > push / damping
    assert push * r.velocity_per_push[0] < push / damping
