"""The statistical comparison behind canary and rollback decisions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tether.versions.statistics import clearly_worse, mean_difference, not_worse

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


def test_non_inferiority_passes_equal_and_better_and_fails_clearly_worse() -> None:
    rng = np.random.default_rng(0)
    base = list(rng.normal(-50, 5, 40))
    same = list(rng.normal(-50, 5, 40))
    better = list(rng.normal(-40, 5, 40))
    worse = list(rng.normal(-70, 5, 40))
    kw = {"margin": 5.0, "z": 1.645, "higher_is_better": True}
    assert not_worse("return", same, base, **kw).passed  # type: ignore[arg-type]
    assert not_worse("return", better, base, **kw).passed  # type: ignore[arg-type]
    assert not not_worse("return", worse, base, **kw).passed  # type: ignore[arg-type]
    # Lower-is-better metrics flip the direction.
    rates = list(rng.uniform(0.0, 0.02, 40))
    high = list(rng.uniform(0.2, 0.3, 40))
    low_kw = {"margin": 0.02, "z": 1.645, "higher_is_better": False}
    assert not_worse("rate", rates, rates, **low_kw).passed  # type: ignore[arg-type]
    assert not not_worse("rate", high, rates, **low_kw).passed  # type: ignore[arg-type]


def test_degradation_needs_more_than_noise() -> None:
    rng = np.random.default_rng(1)
    ref = list(rng.normal(-50, 10, 12))
    noisy = list(rng.normal(-53, 10, 12))  # a bit worse, within noise and margin
    broken = list(rng.normal(-90, 10, 12))
    kw = {"margin": 10.0, "z": 1.645, "higher_is_better": True}
    assert clearly_worse("return", noisy, ref, **kw).passed  # type: ignore[arg-type]
    assert not clearly_worse("return", broken, ref, **kw).passed  # type: ignore[arg-type]
