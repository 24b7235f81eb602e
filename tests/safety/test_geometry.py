"""The one-obstacle fast path of ``Clearance.obstacles`` returns the general path's bits.

The general path runs for any other number of spheres, so the same sphere listed twice
(its minimum is the same column twice) is the oracle for the fast path.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from tether.safety.geometry import Clearance
from tether.safety.presets import arm_limits
from tether.spec import Sphere

_coord = st.floats(-10.0, 10.0, allow_nan=False, allow_subnormal=True)


@settings(max_examples=300, deadline=None)
@given(
    centers=arrays(np.float64, (23, 3), elements=_coord),
    radii=arrays(np.float64, (23,), elements=st.floats(0.0, 0.2)),
    obstacle=st.tuples(_coord, _coord, _coord),
    radius=st.floats(1e-6, 0.5),
)
def test_one_obstacle_matches_the_general_path_bit_for_bit(
    centers: np.ndarray, radii: np.ndarray, obstacle: tuple[float, float, float], radius: float
) -> None:
    sphere = Sphere(obstacle, radius)
    base = arm_limits()
    one = Clearance(dataclasses.replace(base, obstacles=(sphere,)))
    twice = Clearance(dataclasses.replace(base, obstacles=(sphere, sphere)))
    fast, general = one.obstacles(centers, radii), twice.obstacles(centers, radii)
    assert np.float64(fast).tobytes() == np.float64(general).tobytes()


def test_the_fast_path_sees_a_breach() -> None:
    base = arm_limits()
    clearance = Clearance(dataclasses.replace(base, obstacles=(Sphere((0.0, 0.0, 0.0), 0.1),)))
    centers = np.array([[1.0, 0.0, 0.0], [0.15, 0.0, 0.0]])
    radii = np.array([0.02, 0.02])
    # Nearest sphere: 0.15 - 0.02 - 0.1 = 0.03 m, less the margin.
    assert clearance.obstacles(centers, radii) == 0.15 - 0.02 - 0.1 - base.obstacle_margin_m
