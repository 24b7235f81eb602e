"""The statistical comparison behind canary and rollback decisions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tether.versions.statistics import (
    clearly_worse,
    family_quantile,
    mean_difference,
    paired_difference,
    student_t_quantile,
)

values = st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=40)


@settings(max_examples=200)
@given(a=values, b=values, z=st.floats(0.0, 4.0))
def test_difference_is_antisymmetric_and_its_interval_contains_it(
    a: list[float], b: list[float], z: float
) -> None:
    ab, ba = mean_difference(a, b, z=z), mean_difference(b, a, z=z)
    assert ab.diff == pytest.approx(-ba.diff, abs=1e-9)
    assert ab.half_width == pytest.approx(ba.half_width)
    assert ab.lower <= ab.diff <= ab.upper
    assert math.isfinite(ab.half_width)


def test_an_empty_side_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one value on each side"):
        mean_difference([], [1.0], z=1.0)


def test_paired_difference_removes_what_the_pairs_share() -> None:
    rng = np.random.default_rng(0)
    task = rng.normal(0.0, 100.0, 30)  # a task effect both arms share
    a, b = task + rng.normal(1.0, 1.0, 30), task + rng.normal(0.0, 1.0, 30)
    paired = paired_difference(list(a - b), z=1.645)
    unpaired = mean_difference(list(a), list(b), z=1.645)
    assert paired.diff == pytest.approx(unpaired.diff)
    assert paired.half_width < unpaired.half_width / 20
    assert paired.lower > 0.0  # the shift of 1 is shown; unpaired it is lost in the tasks
    assert unpaired.lower < 0.0


@pytest.mark.parametrize(
    ("p", "df", "exact"),
    [(0.95, 29, 1.6991), (0.975, 7, 2.3646), (0.975, 3, 3.1824), (0.99, 10, 2.7638)],
)
def test_student_t_quantile_matches_the_tables(p: float, df: int, exact: float) -> None:
    assert student_t_quantile(p, df) == pytest.approx(exact, rel=0.01)


def test_family_quantile_splits_the_rate_over_the_criteria() -> None:
    assert family_quantile(0.05, 1) == pytest.approx(0.95)
    assert family_quantile(0.06, 3) == pytest.approx(0.98)
    with pytest.raises(ValueError, match="false_rejection_rate"):
        family_quantile(0.0, 3)


def test_degradation_needs_more_than_noise() -> None:
    rng = np.random.default_rng(1)
    ref = list(rng.normal(-50, 10, 12))
    noisy = list(rng.normal(-53, 10, 12))  # a bit worse, within noise and margin
    broken = list(rng.normal(-90, 10, 12))
    kw = {"margin": 10.0, "z": 1.645, "higher_is_better": True}
    assert clearly_worse("return", noisy, ref, **kw).passed  # type: ignore[arg-type]
    assert not clearly_worse("return", broken, ref, **kw).passed  # type: ignore[arg-type]
