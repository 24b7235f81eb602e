"""The one observation normalization: what the engine, the learner and the gate all use."""

from __future__ import annotations

import numpy as np

from tether.policy.manifest import Normalizer
from tether.policy.transforms import ObservationNormalizer, normalizer_arrays


def test_normalizer_is_the_clipped_affine_map_in_float32() -> None:
    norm = Normalizer(mean=(1.0, -2.0, 0.5), var=(4.0, 0.25, 1.0), clip=3.0)
    obs = np.array([[1.0, -2.0, 0.5], [11.0, -1.5, -0.5], [-9.0, -3.0, 100.0]], np.float32)
    got = ObservationNormalizer(norm)(obs)
    mean, inv_std = normalizer_arrays(norm)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.clip((obs - mean) * inv_std, -3.0, 3.0))
    np.testing.assert_array_equal(got[0], np.zeros(3, np.float32))
    assert got.max() == 3.0
    assert got.min() == -3.0


def test_rows_are_normalized_alone_and_out_is_filled_in_place() -> None:
    norm = Normalizer(mean=(0.1, 0.2), var=(2.0, 3.0))
    normalize = ObservationNormalizer(norm)
    obs = np.random.default_rng(0).standard_normal((5, 2)).astype(np.float32)
    out = np.empty((8, 2), np.float32)
    normalize(obs, out=out[:5])
    whole = normalize(obs)
    np.testing.assert_array_equal(out[:5], whole)
    for i in range(5):
        np.testing.assert_array_equal(normalize(obs[i : i + 1])[0], whole[i])
    # Raw float64 observations (as a caller may hold them) give the float32 result.
    np.testing.assert_array_equal(normalize(obs.astype(np.float64)), whole)
