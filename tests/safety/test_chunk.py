"""supervise_chunk: every step of an action chunk checked in order, against the one before."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from safety.builders import N_JOINTS, observation, seven_joint_limits
from tether.safety import ActionSource, LimitsConfig, SafetyCheck, Supervisor
from tether.safety.chunk import supervise_chunk
from tether.safety.errors import SafetyError

MAX_CHANGE = 0.5
RATE_ONLY = seven_joint_limits(
    LimitsConfig(acceleration_limit_scale=3.0, max_action_change_per_step=MAX_CHANGE)
)
HOME = np.asarray(RATE_ONLY.home_position_rad)
OBS = observation(RATE_ONLY, HOME, np.zeros(N_JOINTS))


def test_a_jump_inside_a_chunk_is_limited_and_later_steps_follow_the_safe_one() -> None:
    chunk = np.zeros((5, N_JOINTS), np.float32)
    chunk[2:, 0] = 0.9  # steps 0, 1 hold; step 2 jumps beyond the rate limit and stays
    result = supervise_chunk(Supervisor(RATE_ONLY), OBS, chunk, np.zeros(N_JOINTS, np.float32))
    sources = [v.source for v in result.verdicts]
    assert sources[:2] == [ActionSource.POLICY, ActionSource.POLICY]
    assert sources[2] is ActionSource.CLIPPED
    assert result.verdicts[2].checks & SafetyCheck.RATE
    assert result.first_intervention == 2
    assert result.actions[2, 0] == pytest.approx(MAX_CHANGE, abs=1e-5)
    # Step 3 is judged against step 2's *safe* action: it may close the rest of the gap.
    assert result.actions[3, 0] == pytest.approx(0.9, abs=1e-6)
    assert result.verdicts[3].source is ActionSource.POLICY
    steps = np.diff(np.vstack([np.zeros(N_JOINTS), result.actions]), axis=0)
    assert np.abs(steps).max() <= MAX_CHANGE + 1e-6


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 8).flatmap(
        lambda h: st.lists(
            st.lists(st.floats(-1, 1, width=32), min_size=N_JOINTS, max_size=N_JOINTS),
            min_size=h,
            max_size=h,
        )
    )
)
def test_every_step_of_any_chunk_is_the_supervisor_step_after_the_previous_safe_one(
    rows: list[list[float]],
) -> None:
    chunk = np.asarray(rows, np.float32)
    previous = np.zeros(N_JOINTS, np.float32)
    result = supervise_chunk(Supervisor(RATE_ONLY), OBS, chunk, previous)
    assert result.actions.shape == chunk.shape
    assert result.horizon == len(chunk)
    # (The rate interval always admits the supervisor's own brake, so a change may exceed
    # MAX_CHANGE towards it; what must hold is the step-after-step equivalence.)
    reference = Supervisor(RATE_ONLY)
    before = previous
    for k in range(len(chunk)):
        safe, verdict = reference.filter(OBS, chunk[k], before, observation_age_s=0.0)
        np.testing.assert_array_equal(result.actions[k], safe)
        assert result.verdicts[k] == verdict
        before = safe


def test_an_in_limit_chunk_passes_bit_identical() -> None:
    chunk = np.linspace(0.0, 0.3, 4 * N_JOINTS, dtype=np.float32).reshape(4, N_JOINTS)
    result = supervise_chunk(Supervisor(RATE_ONLY), OBS, chunk, np.zeros(N_JOINTS, np.float32))
    np.testing.assert_array_equal(result.actions, chunk)
    assert not result.intervened
    assert result.checks == 0


def test_a_non_finite_step_is_replaced_and_the_steps_after_it_are_still_checked() -> None:
    chunk = np.zeros((4, N_JOINTS), np.float32)
    chunk[1, 3] = np.nan
    chunk[3, 0] = 1.0
    result = supervise_chunk(Supervisor(RATE_ONLY), OBS, chunk, np.zeros(N_JOINTS, np.float32))
    assert result.verdicts[1].checks & SafetyCheck.NON_FINITE
    assert np.all(np.isfinite(result.actions))
    assert result.verdicts[3].checks & SafetyCheck.RATE
    assert result.checks & SafetyCheck.NON_FINITE


def test_the_tail_of_a_chunk_executed_past_the_staleness_limit_is_a_backup() -> None:
    chunk = np.zeros((6, N_JOINTS), np.float32)
    staleness = RATE_ONLY.command_staleness_s
    result = supervise_chunk(Supervisor(RATE_ONLY), OBS, chunk, None, step_period_s=staleness / 2.5)
    fresh = [not (v.checks & SafetyCheck.STALE) for v in result.verdicts]
    assert fresh == [True, True, True, False, False, False]


@pytest.mark.parametrize("shape", [(0, N_JOINTS), (N_JOINTS,), (2, 3, N_JOINTS)])
def test_a_chunk_of_the_wrong_shape_is_refused(shape: tuple[int, ...]) -> None:
    with pytest.raises(SafetyError, match="shape"):
        supervise_chunk(Supervisor(RATE_ONLY), OBS, np.zeros(shape, np.float32))
