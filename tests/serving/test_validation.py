"""Validation: any wrong input is refused with a message naming field, expected, found."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from tether.serving.config import ValidationConfig
from tether.serving.errors import RequestInvalid
from tether.serving.validation import identifier, scalar, vector

finite = st.floats(-1e3, 1e3, width=32)


@given(st.lists(finite, min_size=5, max_size=5))
def test_good_vectors_pass_unchanged(values: list[float]) -> None:
    out = vector(values, "observation", 5, 1e6)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.asarray(values, dtype=np.float32))


@given(st.lists(finite, max_size=12).filter(lambda v: len(v) != 5))
def test_wrong_length_names_both_lengths(values: list[float]) -> None:
    with pytest.raises(RequestInvalid, match=rf"observation has {len(values)} entries, expected 5"):
        vector(values, "observation", 5, 1e6)


@given(
    st.lists(finite, min_size=5, max_size=5),
    st.integers(0, 4),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)
def test_non_finite_names_the_index(values: list[float], index: int, bad: float) -> None:
    values[index] = bad
    with pytest.raises(RequestInvalid, match=rf"observation\[{index}\] is .*expected a finite"):
        vector(values, "observation", 5, 1e6)


@given(st.integers(0, 4), st.floats(1e7, 1e30))
def test_absurd_magnitude_is_refused(index: int, big: float) -> None:
    values = [0.0] * 5
    values[index] = -big
    with pytest.raises(RequestInvalid, match=rf"observation\[{index}\].*at most 1e\+06"):
        vector(values, "observation", 5, 1e6)


def test_identifier_and_scalar_bounds() -> None:
    cfg = ValidationConfig(max_id_length=4)
    assert identifier("abcd", "client_id", cfg) == "abcd"
    with pytest.raises(RequestInvalid, match="client_id is 5 characters long, expected at most 4"):
        identifier("abcde", "client_id", cfg)
    assert scalar(1.5, "step.reward", 10) == 1.5
    with pytest.raises(RequestInvalid, match=r"step\.reward is nan"):
        scalar(math.nan, "step.reward", 10)


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=6, max_size=6))
def test_a_vector_passes_exactly_when_every_entry_is_finite_and_within_bound(
    values: list[float],
) -> None:
    bound = 1e3
    first_bad = next((i for i, v in enumerate(values) if not math.isfinite(v)), None)
    if first_bad is not None:  # the first non-finite entry is named before any large one
        with pytest.raises(RequestInvalid, match=rf"observation\[{first_bad}\] is .*finite"):
            vector(values, "observation", 6, bound)
    elif any(abs(v) > bound for v in values):
        with pytest.raises(RequestInvalid, match="at most 1000"):
            vector(values, "observation", 6, bound)
    else:
        out = vector(values, "observation", 6, bound)
        np.testing.assert_array_equal(out, np.asarray(values, dtype=np.float32))


@given(st.lists(finite, min_size=7, max_size=7))
def test_a_protobuf_repeated_field_converts_like_a_list(values: list[float]) -> None:
    from tether.v1 import policy_pb2 as pb

    step = pb.StepData(observation=values)
    out = vector(step.observation, "step.observation", 7, 1e6)
    assert out.dtype == np.float32
    assert out.shape == (7,)
    np.testing.assert_array_equal(out, np.asarray(values, dtype=np.float32))


def test_non_finite_reward_of_every_kind_is_refused() -> None:
    for bad in (math.nan, math.inf, -math.inf, 11.0):
        with pytest.raises(RequestInvalid, match=r"step\.reward is .*expected a finite number"):
            scalar(bad, "step.reward", 10)
