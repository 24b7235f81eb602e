"""Property tests of PositionSupervisor over any state and any command, in the style of
libfranka's rate-limiting tests and ros2_control's joint-limiter tests.

Every property is checked against an oracle written here from the limits' definitions
(numpy, not the supervisor's code): the hard range, the per-step change, the range with
its braking curve, the change of the change and the impedance torque, each an interval
of the command, with later ones yielding to earlier ones only when they cannot all hold.
``test_each_guard_is_needed`` shows that the oracle catches a supervisor with any one
check switched off, so the properties can fail.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from tether.safety import ActionSource, BackupConfig, SafetyCheck, SafetyLimits
from tether.safety.position import (
    ImpedanceModel,
    PositionSupervisor,
    PositionSupervisorConfig,
    kernel,
)
from tether.safety.position.presets import arm_impedance, arm_position_limits
from tether.sim import ArmKinematics, arm_spec

ARM_IMPEDANCE = arm_impedance()
SPEC = arm_spec("position")
N = SPEC.n_joints
# The joint checks alone (the Cartesian stage may outrank the rate limits, see
# test_position_cartesian.py); gravity from the arm's own model.
LIMITS = dataclasses.replace(arm_position_limits(), workspace=None, obstacles=())
TIGHT = LIMITS.tightened(0.5)
KINEMATICS = ArmKinematics(SPEC)
DT = LIMITS.control_period_s
LOW = np.asarray(LIMITS.position_low_rad)
HIGH = np.asarray(LIMITS.position_high_rad)
VMAX = np.asarray(LIMITS.velocity_limit_rad_s)
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
# Slack for the oracle's own rounding (the supervisor keeps ~1e-6 inside every interval).
TOL = 1e-9
# Intervals narrower than this are treated as not jointly satisfiable.
WIDTH = 1e-5

unit = st.floats(0.0, 1.0)
any_float = st.one_of(
    st.floats(-3.0, 3.0, width=32),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([np.nan, np.inf, -np.inf, 1e30, -1e30, 3.4e38, 1e300]),
)
any_command = st.one_of(
    st.lists(any_float, min_size=N, max_size=N),
    st.lists(any_float, min_size=0, max_size=N + 2),
)


@dataclasses.dataclass(frozen=True)
class State:
    """One situation: the measured state, the previous command and the remembered change
    (``own``: the previous command is the one the supervisor returned last)."""

    q: np.ndarray
    v: np.ndarray
    previous: np.ndarray | None
    change: np.ndarray
    own: bool

    def observation(self) -> np.ndarray:
        out = np.zeros(SPEC.obs_dim, dtype=np.float32)
        out[:N] = self.q
        out[N : 2 * N] = self.v
        return out

    def supervisor(
        self,
        limits: SafetyLimits = LIMITS,
        impedance: ImpedanceModel = ARM_IMPEDANCE,
        backup: str = "hold",
    ) -> PositionSupervisor:
        sup = PositionSupervisor(
            limits,
            impedance,
            kinematics=KINEMATICS,
            config=PositionSupervisorConfig(backup=BackupConfig(kind=backup)),  # type: ignore[arg-type]
        )
        if self.own and self.usable_previous:
            assert self.previous is not None
            sup._last = (self.previous.tolist(), self.change.tolist())
        return sup

    @property
    def usable_previous(self) -> bool:
        """A previous command inside the joint limits (else it is flagged and ignored)."""
        return self.previous is not None and bool(
            np.all((self.previous >= LOW) & (self.previous <= HIGH))
        )

    def reference(self) -> tuple[np.ndarray, np.ndarray]:
        """The reference command and the previous change the limits are taken against."""
        q, v = self.measured()
        if self.previous is None or not self.usable_previous:
            return q, v * DT  # none, or unusable (flagged INVALID_PREVIOUS)
        return self.previous.astype(np.float64), (self.change if self.own else v * DT)

    def measured(self) -> tuple[np.ndarray, np.ndarray]:
        obs = self.observation().astype(np.float64)
        return obs[:N], obs[N : 2 * N]

    def sag(self, impedance: ImpedanceModel = ARM_IMPEDANCE) -> np.ndarray:
        """The sag a fresh supervisor learns on this call (``_learn_sag``): at rest under
        its own steady command, the arm's offset from it, within torque limit / stiffness;
        else none."""
        q, v = self.measured()
        if not (self.own and self.usable_previous) or self.previous is None:
            return np.zeros(N)
        if np.abs(v).max() > 0.05 or np.abs(self.change).max() > kernel.STEADY_RAD:
            return np.zeros(N)
        bound = np.asarray(LIMITS.torque_limit_nm) / np.asarray(impedance.stiffness_nm_per_rad)
        return np.clip(q - self.previous.astype(np.float64), -bound, bound)


@st.composite
def states(draw: st.DrawFn, reach: float = 0.2) -> State:
    """Positions within the joint limits widened by ``reach``, velocities within 1.5 × the
    limit, and a previous command inside the limits: none, the supervisor's own (with a
    remembered change within the per-step limit) or someone else's."""
    fq = np.array(draw(st.lists(unit, min_size=N, max_size=N)))
    fv = np.array(draw(st.lists(st.floats(-1.5, 1.5), min_size=N, max_size=N)))
    q = LOW - reach + fq * (HIGH - LOW + 2 * reach)
    v = fv * VMAX
    kind = draw(st.sampled_from(["none", "own", "other", "near"]))
    previous: np.ndarray | None = None
    change = np.zeros(N)
    if kind != "none":
        if kind == "near":  # tracking: close to the arm
            offset = np.array(draw(st.lists(st.floats(-0.3, 0.3), min_size=N, max_size=N)))
            previous = np.clip(q + offset, LOW + 1e-6, HIGH - 1e-6).astype(np.float32)
        else:
            fp = np.array(draw(st.lists(unit, min_size=N, max_size=N)))
            previous = (LOW + 1e-6 + fp * (HIGH - LOW - 2e-6)).astype(np.float32)
        fc = np.array(draw(st.lists(st.floats(-1.0, 1.0), min_size=N, max_size=N)))
        change = fc * VMAX * DT
    return State(q, v, previous, change, kind in ("own", "near"))


@st.composite
def tracking_states(draw: st.DrawFn) -> State:
    """A command tracked by the arm: inside the range, a little ahead of the arm, moving
    at about the arm's speed (where every limit can usually hold)."""
    fq = np.array(draw(st.lists(unit, min_size=N, max_size=N)))
    q = LOW + 0.2 + fq * (HIGH - LOW - 0.4)
    fc = np.array(draw(st.lists(st.floats(-0.8, 0.8), min_size=N, max_size=N)))
    change = fc * VMAX * DT
    lead = np.array(draw(st.lists(st.floats(-0.02, 0.02), min_size=N, max_size=N)))
    previous = (q + lead).astype(np.float32)
    own = draw(st.booleans())
    return State(q, change / DT, previous, change, own)


def oracle(
    state: State, limits: SafetyLimits = LIMITS, impedance: ImpedanceModel = ARM_IMPEDANCE
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The five intervals of the command, in priority order, from their definitions."""
    q, v = state.measured()
    ref, dp = state.reference()
    low, high = np.asarray(limits.position_low_rad), np.asarray(limits.position_high_rad)
    margin = np.asarray(limits.position_margin_rad)
    hard = np.asarray(limits.hard_margin_rad)
    step = np.asarray(limits.velocity_limit_rad_s) * limits.control_period_s
    s = np.asarray(limits.acceleration_limit_rad_s2) * limits.control_period_s**2
    b = np.minimum(np.asarray(limits.braking_deceleration_rad_s2) * limits.control_period_s**2, s)
    # Where the arm settles under the command: a sag toward a limit narrows the range.
    sag = state.sag(impedance)
    soft_lo = low + margin - np.minimum(sag, 0.0)
    soft_hi = high - margin - np.maximum(sag, 0.0)
    # Largest step Δ with Δ + Δ²/2b ≤ d: the command can still stop within d.
    d_hi, d_lo = soft_hi - ref, ref - soft_lo
    with np.errstate(invalid="ignore"):
        up = np.where(d_hi > 0, ref + b * (np.sqrt(1 + 2 * d_hi / b) - 1), soft_hi)
        down = np.where(d_lo > 0, ref - b * (np.sqrt(1 + 2 * d_lo / b) - 1), soft_lo)
    kp = np.asarray(impedance.stiffness_nm_per_rad)
    kd = np.asarray(impedance.damping_nm_s_per_rad)
    tau = np.asarray(limits.torque_limit_nm)
    g = KINEMATICS.gravity_torque(q)
    bias = kd * v - g
    return [
        (low + hard, high - hard),
        (ref - step, ref + step),
        (np.maximum(down, soft_lo), np.minimum(up, soft_hi)),
        (ref + dp - s, ref + dp + s),
        (q + (bias - tau) / kp, q + (bias + tau) / kp),
    ]


def violations(
    state: State,
    out: np.ndarray,
    limits: SafetyLimits = LIMITS,
    impedance: ImpedanceModel = ARM_IMPEDANCE,
) -> list[str]:
    """The checks ``out`` breaks among those that could hold together with the ones
    before them (by priority), per joint."""
    x = out.astype(np.float64)
    names = ["hard range", "per-step change", "range with braking", "acceleration", "torque"]
    found: list[str] = []
    lo_all = np.full(N, -np.inf)
    hi_all = np.full(N, np.inf)
    feasible = np.ones(N, dtype=bool)
    for name, (lo, hi) in zip(names, oracle(state, limits, impedance), strict=True):
        lo_all = np.maximum(lo_all, lo)
        hi_all = np.minimum(hi_all, hi)
        feasible &= hi_all - lo_all >= WIDTH
        bad = feasible & ((x < lo - TOL) | (x > hi + TOL))
        found += [f"{name} on joint {j}" for j in np.flatnonzero(bad)]
    return found


def _filter(state: State, command: Any, **kw: Any) -> tuple[np.ndarray, Any]:
    return state.supervisor(**kw).filter(state.observation(), command, state.previous)


@SETTINGS
@given(states(), any_command)
def test_never_raises_and_never_returns_a_non_finite_command(state: State, command: list) -> None:
    out, verdict = _filter(state, command)
    assert out.dtype == np.float32
    assert out.shape == (N,)
    assert np.isfinite(out).all()
    values = np.asarray(command, dtype=np.float64) if len(command) == N else None
    if values is None:
        assert verdict.checks & SafetyCheck.INVALID_SHAPE
    elif not np.isfinite(values).all():
        assert verdict.checks & SafetyCheck.NON_FINITE
        assert verdict.source is ActionSource.BACKUP


@SETTINGS
@given(st.one_of(states(), tracking_states()), st.lists(any_float, min_size=N, max_size=N))
def test_every_corrected_command_satisfies_every_limit_that_can_hold(
    state: State, command: list
) -> None:
    out, _ = _filter(state, command)
    assert violations(state, out) == []


@SETTINGS
@given(st.one_of(tracking_states(), states(reach=0.0)), st.lists(unit, min_size=N, max_size=N))
def test_an_in_limit_command_passes_bit_identical(state: State, fractions: list) -> None:
    intervals = oracle(state)
    lo = np.max([lo for lo, _ in intervals], axis=0) + 1e-6
    hi = np.min([hi for _, hi in intervals], axis=0) - 1e-6
    assume(np.all(hi - lo >= WIDTH))
    command = (lo + np.asarray(fractions) * (hi - lo)).astype(np.float32)
    assume(np.all((command >= lo) & (command <= hi)))
    out, verdict = _filter(state, command)
    assert out.tobytes() == command.tobytes()
    assert verdict.source is ActionSource.POLICY
    assert verdict.correction_norm == 0.0


@SETTINGS
@given(st.one_of(states(), tracking_states()), st.lists(any_float, min_size=N, max_size=N))
def test_filtering_is_idempotent(state: State, command: list) -> None:
    once, _ = _filter(state, command)
    twice, verdict = _filter(state, once)
    assert twice.tobytes() == once.tobytes()
    assert verdict.source is ActionSource.POLICY


@SETTINGS
@given(states(), st.sampled_from([np.nan, np.inf, -np.inf]), st.integers(0, N - 1))
def test_nan_and_inf_never_pass(state: State, bad: float, joint: int) -> None:
    command = np.asarray(state.q, dtype=np.float32).copy()
    command[joint] = bad
    out, verdict = _filter(state, command)
    assert np.isfinite(out).all()
    assert verdict.checks & SafetyCheck.NON_FINITE
    assert verdict.source is ActionSource.BACKUP
    assert violations(state, out) == []


@SETTINGS
@given(states(), st.sampled_from(["hold", "brake", "go_home"]))
def test_backups_satisfy_the_limits(state: State, kind: str) -> None:
    sup = state.supervisor(backup=kind)
    out, verdict = sup.backup_action(state.observation(), state.previous)
    assert verdict.checks & SafetyCheck.TAKEOVER
    assert np.isfinite(out).all()
    assert violations(state, out) == []
    stale, verdict = state.supervisor(backup=kind).filter(
        state.observation(), state.q, state.previous, observation_age_s=10.0
    )
    assert verdict.checks & SafetyCheck.STALE
    assert violations(state, stale) == []


@SETTINGS
@given(states(), st.lists(any_float, min_size=N, max_size=N))
def test_tightened_limits_hold_from_any_state_the_base_ones_leave(
    state: State, command: list
) -> None:
    out, _ = _filter(state, command, limits=TIGHT)
    assert violations(state, out, TIGHT) == []


@SETTINGS
@given(states(), st.one_of(any_command, st.none(), st.text(max_size=3)))
def test_any_observation_is_survived(state: State, command: Any) -> None:
    sup = state.supervisor()
    for obs in (state.observation()[:5], np.full(SPEC.obs_dim, np.nan), [["x"]], 3.0):
        out, verdict = sup.filter(obs, command, state.previous)
        assert verdict.checks & SafetyCheck.INVALID_OBSERVATION
        assert np.isfinite(out).all()
        assert out.shape == (N,)


def _relaxed(check: str) -> tuple[SafetyLimits, ImpedanceModel]:
    """Limits and gains the supervisor is built with when ``check`` is switched off."""
    if check == "range":
        return dataclasses.replace(
            LIMITS,
            position_low_rad=tuple(LOW - 10),
            position_high_rad=tuple(HIGH + 10),
            home_position_rad=LIMITS.home_position_rad,
        ), ARM_IMPEDANCE
    if check == "velocity":
        return dataclasses.replace(LIMITS, velocity_limit_rad_s=tuple(VMAX * 1e3)), ARM_IMPEDANCE
    if check == "acceleration":
        accel = np.asarray(LIMITS.acceleration_limit_rad_s2) * 1e4
        return dataclasses.replace(LIMITS, acceleration_limit_rad_s2=tuple(accel)), ARM_IMPEDANCE
    assert check == "torque"
    soft = ImpedanceModel(
        tuple(k * 1e-3 for k in ARM_IMPEDANCE.stiffness_nm_per_rad),
        ARM_IMPEDANCE.damping_nm_s_per_rad,
    )
    return LIMITS, soft


@pytest.mark.parametrize("check", ["range", "velocity", "acceleration", "torque"])
def test_each_guard_is_needed(check: str) -> None:
    """With one check switched off, commands break that check's limit (the oracle sees
    it); with every check on, none does, on the same states and commands."""
    limits, impedance = _relaxed(check)
    rng = np.random.default_rng(1)
    broken = guarded = 0
    for _ in range(300):
        q = rng.uniform(LOW, HIGH)
        v = rng.uniform(-1, 1, N) * VMAX
        # The torque check binds only where the command leads the arm by most of the
        # impedance's saturation error (0.5 rad): previous commands that far ahead.
        lead = 0.6 if check == "torque" else 0.2
        previous = np.clip(q + rng.uniform(-lead, lead, N), LOW, HIGH).astype(np.float32)
        state = State(q, v, previous, rng.uniform(-1, 1, N) * VMAX * DT, True)
        command = q + rng.uniform(-3.0, 3.0, N)
        out, _ = state.supervisor(limits, impedance).filter(state.observation(), command, previous)
        broken += bool(violations(state, out))
        out, _ = state.supervisor().filter(state.observation(), command, previous)
        guarded += bool(violations(state, out))
    assert guarded == 0
    assert broken > 0
