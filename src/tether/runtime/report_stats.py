"""The confidence intervals a run's summary states: how sure each success figure is.

Success is a count of successes among episodes, so its interval is Wilson's score
interval (well behaved at 0 and 1 and for the few dozen episodes a run has). How much of
its pre-drift success a role kept is a ratio of two such proportions; its interval is
bounded by the two Wilson intervals' ends.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Z_95 = 1.959963984540054  # two-sided 95 %


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float] | None:
    """Wilson score interval of ``successes / n``; None without episodes."""
    if n <= 0:
        return None
    if successes <= 0:  # the closed forms of the ends, exact where rounding would not be
        return 0.0, (z * z / n) / (1 + z * z / n)
    if successes >= n:
        return 1 / (1 + z * z / n), 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def ratio_interval(
    k_after: int, n_after: int, k_before: int, n_before: int, z: float = Z_95
) -> tuple[float, float, float] | None:
    """(ratio, low, high) of ``(k_after/n_after) / (k_before/n_before)``; None when a side
    has no episodes or the reference never succeeded.

    The bounds divide the ends of the two Wilson intervals (after's low by before's high,
    after's high by before's low): conservative, and sensible at 0 successes, where
    log-ratio intervals need a continuity correction that makes them very wide.
    """
    after, before = wilson_interval(k_after, n_after, z), wilson_interval(k_before, n_before, z)
    if after is None or before is None or k_before <= 0:
        return None
    ratio = (k_after / n_after) / (k_before / n_before)
    return ratio, after[0] / before[1], after[1] / before[0]


def mean_and_error(values: Sequence[float]) -> tuple[float, float] | None:
    """Mean and its standard error; None without values."""
    if not values:
        return None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, float("nan")
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(var / len(values))
