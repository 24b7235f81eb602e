"""Tightening the limits in the middle of an episode (RESTRICTED) never breaks the true ones.

When the degradation level drops to RESTRICTED, serving swaps the robot's supervisor for
``base.with_limits(limits.tightened(0.5))``: half the velocity range, a position range
shrunk about its centre, a wider obstacle margin. The arm is then often already outside
the new envelope, and the supervisor must bring it back without crossing the *true*
limits. With brakes sized for the weakest declared gain, the shipped policy's arm,
switched at step 100, chattered at full torque (each brake reversed the joint at the
arm's true gain, 45-90 times the weak one, and the halved velocity limit braked the
reversal back) and walked across its true joint limits: 80 violation steps in 10
episodes. Measured here on the MuJoCo arm (``ArmEnv``'s own counts) and, for any state
and action, on the supervisor's one-step model with the true gain anywhere in its range
and the damping at or above what the limits declare.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from safety.builders import observation
from tests.safety.adversary import load_adversary
from tether.policy import EngineConfig, PolicyEngine
from tether.safety import Supervisor
from tether.safety.envelope import JointEnvelope
from tether.safety.presets import arm_limits, arm_supervisor
from tether.sim import ArmDynamics, ArmEnv, DriftSchedule
from tether.sim.config import ArmEnvConfig

# These tests exercise the torque interface, the arm's second command interface.
TORQUE = ArmEnvConfig(command_interface="torque")

BASE = arm_limits()
TIGHT = BASE.tightened(0.5)
N = BASE.n_joints
LOW = np.asarray(BASE.position_low_rad)
HIGH = np.asarray(BASE.position_high_rad)
MARGIN = np.asarray(BASE.position_margin_rad)
VMAX = np.asarray(BASE.velocity_limit_rad_s)
A_BRAKE = np.asarray(BASE.braking_deceleration_rad_s2)
GAIN_HI = np.asarray(BASE.acceleration_per_action_rad_s2)
DT = BASE.control_period_s
DAMPING = np.asarray(BASE.damping_per_rad_s)
BASE_ENVELOPE = JointEnvelope(BASE)
# The model without kinematics: gravity compensation is zero, the torque limit stays.
TIGHT_SUPERVISOR = Supervisor(TIGHT)
OBS_DIM = 14

EPISODE_SEEDS = (0, 1, 2, 3, 4, 32)  # 32: a target past the obstacle
SWITCH_STEPS = (100, 40, 150)  # when RESTRICTED starts, cycled over the episodes
STEPS = 200
NOMINAL = ArmDynamics.nominal()
DRIFTED = DriftSchedule.demo(start_step=0, ramp_steps=2).dynamics_at(10, NOMINAL)


@pytest.fixture(scope="module")
def engine() -> PolicyEngine:
    torch.set_num_threads(1)
    return PolicyEngine(load_adversary(), EngineConfig(execution="eager"))


def _run_switching(
    engine: PolicyEngine, dynamics: ArmDynamics, deterministic: bool, factor: float
) -> tuple[int, int, int]:
    """(contact steps, joint-limit violation steps, steps) with the supervisor switched
    from the base limits to the tightened ones mid-episode, as serving does."""
    base = arm_supervisor()
    env = ArmEnv(config=TORQUE, dynamics=dynamics, seed=1)
    contacts = violations = steps = 0
    for k, seed in enumerate(EPISODE_SEEDS):
        switch = SWITCH_STEPS[k % len(SWITCH_STEPS)]
        supervisor = base
        obs, _ = env.reset(seed=seed)
        previous: np.ndarray | None = None
        for t in range(STEPS):
            if t == switch:
                supervisor = base.with_limits(BASE.tightened(factor))
            action = engine.act(obs[None].astype(np.float32), deterministic).actions[0]
            action, _ = supervisor.filter(obs, action, previous)
            previous = action
            obs, _, _, truncated, info = env.step(action)
            steps += 1
            contacts += bool(info["obstacle_contact"])
            violations += bool(info["joint_limit_violation"])
            if truncated:
                break
    return contacts, violations, steps


@pytest.mark.parametrize(
    ("dynamics", "deterministic"),
    [(NOMINAL, True), (DRIFTED, True), (NOMINAL, False)],
    ids=["nominal", "drifted", "nominal-sampled"],
)
# 0.5: RESTRICTED (DegradationConfig.restricted_tighten_factor); 0.8: a canary and its
# control (CanaryConfig.safety_tightening).
@pytest.mark.parametrize("factor", [0.5, 0.8], ids=["restricted", "canary"])
def test_switching_to_tightened_limits_mid_episode_never_violates_or_touches(
    engine: PolicyEngine, dynamics: ArmDynamics, deterministic: bool, factor: float
) -> None:
    contacts, violations, steps = _run_switching(engine, dynamics, deterministic, factor)
    assert (contacts, violations) == (0, 0), (contacts, violations, steps)


def _next_velocities(v: float, u: float, joint: int) -> list[float]:
    """The joint's velocity after one step of the model q̈ = G·(u − c·q̇) (no gravity),
    solved exactly, at the weakest, a middle and the fastest gain the limits declare, and
    at the smallest damping they declare and three times that."""
    gains = (A_BRAKE[joint], 0.5 * (A_BRAKE[joint] + GAIN_HI[joint]), GAIN_HI[joint])
    out = []
    for g in gains:
        for c in (DAMPING[joint], 3.0 * DAMPING[joint]):
            steady = u / c
            out.append(steady + (v - steady) * float(np.exp(-g * c * DT)))
    return out


actions = st.lists(
    st.one_of(st.floats(-1.0, 1.0, width=32), st.sampled_from([-1.0, 1.0, 0.0])),
    min_size=N,
    max_size=N,
)
previous_actions = st.one_of(
    st.none(),
    st.lists(st.floats(-1.0, 1.0, width=32), min_size=N, max_size=N).map(
        lambda xs: np.asarray(xs, dtype=np.float32)
    ),
)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def base_envelope_states(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """States the base supervisor can leave the arm in: any position inside the hard
    (untightened) range, so often outside the tightened one, moving no faster than the
    base velocity limit and than braking from which still stops inside the hard range."""
    fq = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=N, max_size=N)))
    fv = draw(st.lists(st.floats(-1.0, 1.0), min_size=N, max_size=N))
    q = LOW + MARGIN + fq * (HIGH - LOW - 2 * MARGIN)
    v = np.zeros(N)
    for j, f in enumerate(fv):
        room = (HIGH[j] - MARGIN[j] - q[j]) if f > 0 else (q[j] - LOW[j] - MARGIN[j])
        speed = min(VMAX[j], BASE_ENVELOPE.stopping_velocity(room, j))
        v[j] = 0.999 * f * speed
    return q, v


@SETTINGS
@given(state=base_envelope_states(), action=actions, previous=previous_actions)
def test_the_tightened_supervisor_keeps_every_predicted_stop_inside_the_true_limits(
    state: tuple[np.ndarray, np.ndarray], action: list[float], previous: np.ndarray | None
) -> None:
    obs = observation(TIGHT, *state, size=OBS_DIM)
    q = obs[:N].astype(np.float64)
    v = obs[N : 2 * N].astype(np.float64)
    out, _ = TIGHT_SUPERVISOR.filter(obs, np.asarray(action, dtype=np.float32), previous)
    for j in range(N):
        for v_next in _next_velocities(v[j], float(out[j]), j):
            # Where the joint stops braking at the deceleration the limits rely on.
            stop = q[j] + v_next * DT + v_next * abs(v_next) / (2 * A_BRAKE[j])
            assert LOW[j] + MARGIN[j] - 1e-5 <= stop <= HIGH[j] - MARGIN[j] + 1e-5, (j, v_next)


@st.composite
def beyond_hard_states(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int, float]:
    """A joint inside its true limits but beyond the hard range (in the base margin),
    moving either way up to the base velocity limit; the others anywhere in range."""
    q, v = draw(base_envelope_states())
    joint = draw(st.integers(0, N - 1))
    side = draw(st.sampled_from([-1.0, 1.0]))
    into = draw(st.floats(0.0, 1.0)) * MARGIN[joint]
    q[joint] = HIGH[joint] - into if side > 0 else LOW[joint] + into
    v[joint] = draw(st.floats(-1.0, 1.0)) * VMAX[joint]
    return q, v, joint, side


@SETTINGS
@given(state=beyond_hard_states(), action=actions, previous=previous_actions)
def test_the_tightened_supervisor_never_drives_a_joint_further_outward_past_its_limit(
    state: tuple[np.ndarray, np.ndarray, int, float],
    action: list[float],
    previous: np.ndarray | None,
) -> None:
    q, v, joint, side = state
    obs = observation(TIGHT, q, v, size=OBS_DIM)
    v32 = float(obs[N + joint])
    out, _ = TIGHT_SUPERVISOR.filter(obs, np.asarray(action, dtype=np.float32), previous)
    for v_next in _next_velocities(v32, float(out[joint]), joint):
        # Never faster outward than now, and a joint moving inward never turns outward
        # (braking its inward speed for the halved velocity limit reversed it).
        assert side * v_next <= max(side * v32, 0.0) + 1e-6, (v32, v_next)
    # An outward push unguarded does drive it outward: the property can fail.
    unguarded = _next_velocities(v32, side, joint)
    assert max(side * x for x in unguarded) > max(side * v32, 0.0)
