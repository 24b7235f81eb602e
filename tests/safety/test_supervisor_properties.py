"""Property tests of Supervisor.filter over any in-range state and any action.

Each property is checked against the limits themselves (recomputed intervals, or a
simulation of the supervisor's model with the true gain anywhere in its declared
range), and the guard-free action is shown to break the same property.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from safety.builders import N_JOINTS, observation, seven_joint_limits, step_model
from tether.safety import PASSED, ActionSource, SafetyCheck, Supervisor
from tether.safety.envelope import JointEnvelope

LIMITS = seven_joint_limits()
SUPERVISOR = Supervisor(LIMITS)
ENVELOPE = JointEnvelope(LIMITS)
LOW = np.asarray(LIMITS.position_low_rad)
HIGH = np.asarray(LIMITS.position_high_rad)
VMAX = np.asarray(LIMITS.velocity_limit_rad_s)
A_BRAKE = np.asarray(LIMITS.braking_deceleration_rad_s2)
GAIN_HI = np.asarray(LIMITS.acceleration_per_action_rad_s2)
MARGIN = np.asarray(LIMITS.position_margin_rad)
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

unit = st.floats(0.0, 1.0)
any_float = st.one_of(
    st.floats(-1.0, 1.0, width=32),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([np.nan, np.inf, -np.inf, 1e30, -1e30, 3.4e38]),
)
any_action = st.one_of(
    st.lists(any_float, min_size=N_JOINTS, max_size=N_JOINTS),
    st.lists(any_float, min_size=0, max_size=N_JOINTS + 2),
)


@st.composite
def states(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """Joint positions within the position limits, velocities within the velocity limits."""
    fq = np.array(draw(st.lists(unit, min_size=N_JOINTS, max_size=N_JOINTS)))
    fv = np.array(draw(st.lists(st.floats(-1.0, 1.0), min_size=N_JOINTS, max_size=N_JOINTS)))
    return LOW + fq * (HIGH - LOW), fv * VMAX


previous_actions = st.one_of(
    st.none(),
    st.lists(st.floats(-1.0, 1.0, width=32), min_size=N_JOINTS, max_size=N_JOINTS).map(
        lambda xs: np.asarray(xs, dtype=np.float32)
    ),
)


def _obs(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    return observation(LIMITS, q, v)


@SETTINGS
@given(state=states(), action=any_action, previous=previous_actions)
def test_output_is_finite_and_inside_every_interval(
    state: tuple[np.ndarray, np.ndarray], action: list[float], previous: np.ndarray | None
) -> None:
    q, v = state
    obs = _obs(q, v)
    out, verdict = SUPERVISOR.filter(obs, action, previous)
    assert out.dtype == np.float32
    assert out.shape == (N_JOINTS,)
    assert np.all(np.isfinite(out))
    qq, vv = obs[:N_JOINTS].astype(np.float64), obs[N_JOINTS : 2 * N_JOINTS].astype(np.float64)
    b = ENVELOPE.bounds(
        qq.tolist(), vv.tolist(), [0.0] * N_JOINTS, None if previous is None else previous.tolist()
    )
    assert np.all(out >= b.lo)
    assert np.all(out <= b.hi)
    assert np.all(np.abs(out) <= np.asarray(b.torque_hi))
    raw = np.asarray(action, dtype=np.float64)
    if raw.shape != (N_JOINTS,) or not np.all(np.isfinite(raw)):
        assert verdict.source is ActionSource.BACKUP
        assert verdict.checks & (SafetyCheck.INVALID_SHAPE | SafetyCheck.NON_FINITE)
    assert np.isfinite(verdict.correction_norm)


@SETTINGS
@given(state=states(), fractions=st.lists(unit, min_size=N_JOINTS, max_size=N_JOINTS))
def test_an_action_within_every_limit_is_returned_bit_identical_and_unflagged(
    state: tuple[np.ndarray, np.ndarray], fractions: list[float]
) -> None:
    q, v = state
    obs = _obs(q, v)
    b = ENVELOPE.bounds(
        obs[:N_JOINTS].astype(np.float64).tolist(),
        obs[N_JOINTS : 2 * N_JOINTS].astype(np.float64).tolist(),
        [0.0] * N_JOINTS,
        None,
    )
    lo, hi = np.asarray(b.lo), np.asarray(b.hi)
    action = (lo + np.asarray(fractions) * (hi - lo)).astype(np.float32)
    assume(np.all(action >= lo) and np.all(action <= hi))
    out, verdict = SUPERVISOR.filter(obs, action)
    assert out.tobytes() == action.tobytes()
    assert verdict == PASSED


@SETTINGS
@given(state=states(), action=any_action, previous=previous_actions)
def test_filtering_twice_equals_filtering_once(
    state: tuple[np.ndarray, np.ndarray], action: list[float], previous: np.ndarray | None
) -> None:
    obs = _obs(*state)
    once, _ = SUPERVISOR.filter(obs, action, previous)
    twice, verdict = SUPERVISOR.filter(obs, once, previous)
    assert twice.tobytes() == once.tobytes()
    assert verdict.source is ActionSource.POLICY


def _drive_toward_limit(
    joint: int, sign: float, gain: float, start: float, guarded: bool, steps: int = 250
) -> float:
    """Push one joint at full torque toward a limit from full speed; the farthest position."""
    q = LOW + 0.5 * (HIGH - LOW)
    q[joint] = LOW[joint] + start * (HIGH[joint] - LOW[joint])
    v = np.zeros(N_JOINTS)
    v[joint] = sign * VMAX[joint]
    push = np.zeros(N_JOINTS, dtype=np.float32)
    push[joint] = sign
    gains = np.full(N_JOINTS, gain)
    previous: np.ndarray | None = None
    extreme = q[joint]
    for _ in range(steps):
        u = push
        if guarded:
            u, _ = SUPERVISOR.filter(_obs(q, v), push, previous)
            previous = u
        q, v = step_model(LIMITS, q, v, u, gains)
        extreme = max(extreme, q[joint]) if sign > 0 else min(extreme, q[joint])
    return float(extreme)


# Each example simulates hundreds of control steps twice; fewer examples keep it fast.
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    joint=st.integers(0, N_JOINTS - 1),
    sign=st.sampled_from([-1.0, 1.0]),
    gain_fraction=unit,
    start=st.floats(0.3, 0.7),
)
def test_full_speed_toward_a_limit_stops_inside_it(
    joint: int, sign: float, gain_fraction: float, start: float
) -> None:
    # The true gain is anywhere between what braking may rely on and the declared bound.
    gain = A_BRAKE[joint] + gain_fraction * (GAIN_HI[joint] - A_BRAKE[joint])
    extreme = _drive_toward_limit(joint, sign, gain, start, guarded=True)
    assert LOW[joint] + MARGIN[joint] - 1e-6 <= extreme <= HIGH[joint] - MARGIN[joint] + 1e-6
    # The same drive without the supervisor leaves the range: the property can fail.
    unguarded = _drive_toward_limit(joint, sign, gain, start, guarded=False)
    assert not LOW[joint] <= unguarded <= HIGH[joint]


@SETTINGS
@given(
    joint=st.integers(0, N_JOINTS - 1),
    beyond=st.floats(1e-4, 0.3),
    side=st.sampled_from([-1.0, 1.0]),
    speed=st.floats(-1.0, 1.0),
    action=st.lists(st.floats(-1.0, 1.0, width=32), min_size=N_JOINTS, max_size=N_JOINTS),
    gain_fraction=unit,
)
def test_a_joint_beyond_a_limit_may_only_move_back_inward(
    joint: int, beyond: float, side: float, speed: float, action: list[float], gain_fraction: float
) -> None:
    q = LOW + 0.5 * (HIGH - LOW)
    q[joint] = HIGH[joint] + beyond if side > 0 else LOW[joint] - beyond
    v = np.zeros(N_JOINTS)
    v[joint] = speed * VMAX[joint]
    obs = _obs(q, v)
    v32 = float(obs[N_JOINTS + joint])
    gain = A_BRAKE[joint] + gain_fraction * (GAIN_HI[joint] - A_BRAKE[joint])
    out, _ = SUPERVISOR.filter(obs, np.asarray(action, dtype=np.float32))
    v_next = v32 + gain * float(out[joint]) * LIMITS.control_period_s
    outward = side * v_next
    # It never starts (or keeps) moving outward, unless even a full brake cannot stop it
    # within one step, in which case it brakes at full torque.
    full_brake = np.isclose(out[joint], -side, atol=1e-5)
    assert outward <= 1e-6 or full_brake
    assert side * float(out[joint]) <= 1e-6 or side * v32 < 0


def test_without_the_guard_a_joint_beyond_a_limit_is_pushed_further_out() -> None:
    q = LOW + 0.5 * (HIGH - LOW)
    q[0] = HIGH[0] + 0.05
    outward = np.zeros(N_JOINTS, dtype=np.float32)
    outward[0] = 1.0
    out, verdict = SUPERVISOR.filter(_obs(q, np.zeros(N_JOINTS)), outward)
    assert out[0] <= 0.0 < outward[0]
    assert verdict.checks & SafetyCheck.POSITION
