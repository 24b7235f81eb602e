"""The poses the arm passes through before it can stop: the path the Cartesian checks test.

The supervisor predicts where each joint will be one step ahead plus its braking
distance (``JointEnvelope.predict``). Checking only that end pose lets a fast arm sweep
*past* an obstacle: the pose now and the pose after braking are both clear while the
arm in between goes through it (the shipped policy did that on the built-in arm, at
base speeds whose braking distance is over a radian). So the checks test poses spaced
along the straight joint-space path from the current pose to the predicted one.

With a per-joint reach bound (``tether.safety.reach``: no point of the arm moves more
than ``Σ_j reach_j·|Δq_j|`` metres), consecutive samples are at most ``spacing_m`` apart
in Cartesian space, so every pose of the path is within ``spacing_m / 2`` of a checked
one and its clearance is at most that below the checked clearance; the supervisor's
obstacle margin must exceed that (the default spacing is a third of the default margin).
Without a known reach, each joint is assumed to move points at most ``1 m/rad`` (arms
shorter than a metre), and the spacing is only a sampling density, not a bound.

Invariant: the samples depend only on the two poses, the reach and the spacing, and the
last one is the predicted pose itself, so the optimized supervisor and the test oracle
evaluate the same poses to the bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# Assumed per-joint reach (m/rad) for kinematics without a known one.
UNKNOWN_REACH_M_PER_RAD = 1.0


def path_count(
    start: Sequence[float],
    end: Sequence[float],
    reach: Sequence[float] | None,
    spacing_m: float,
    max_samples: int,
) -> tuple[int, float]:
    """How many samples the path gets, and its length by the reach bound (m).

    The count is the smallest that keeps consecutive samples ``spacing_m`` apart, at
    least 1 (the end pose) and at most ``max_samples``.
    """
    length = 0.0
    if reach is None:
        for a, b in zip(start, end, strict=True):
            length += UNKNOWN_REACH_M_PER_RAD * abs(b - a)
    else:
        for r, a, b in zip(reach, start, end, strict=True):
            length += r * abs(b - a)
    count = math.ceil(length / spacing_m) if length > spacing_m else 1
    return (count if count < max_samples else max_samples), length


def path_pose(start: Sequence[float], end: Sequence[float], k: int, count: int) -> list[float]:
    """Sample ``k`` (1..count) of the path: the pose at fraction ``k/count``; the last one
    is ``end`` itself."""
    if k == count:
        return list(end)
    f = k / count
    return [a + f * (b - a) for a, b in zip(start, end, strict=True)]


def path_samples(
    start: Sequence[float],
    end: Sequence[float],
    reach: Sequence[float] | None,
    spacing_m: float,
    max_samples: int,
) -> list[list[float]]:
    """Every sample of the path from ``start`` to ``end`` (``start`` excluded), in order."""
    count, _ = path_count(start, end, reach, spacing_m, max_samples)
    return [path_pose(start, end, k, count) for k in range(1, count + 1)]
