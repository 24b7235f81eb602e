"""The confidence intervals a run's summary states: how sure each success figure is.

Success is a count of successes among episodes, so its interval is Wilson's score
interval (well behaved at 0 and 1 and for the few dozen episodes a run has). How much of
its pre-drift success a role kept is a ratio of two such proportions; its interval is
the MOVER-R interval built from the two Wilson intervals (Donner and Zou 2012, "Closed-
form confidence intervals for functions of the normal mean and standard deviation";
Newcombe's method of variance estimates recovery applied to a ratio), whose coverage
stays near 95 % at the run's few dozen episodes. Dividing one interval's ends by the
other's would cover far more often than 95 % and call real differences unclear.
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
    has no episodes or the reference never succeeded (the module says which interval)."""
    after, before = wilson_interval(k_after, n_after, z), wilson_interval(k_before, n_before, z)
    if after is None or before is None or k_before <= 0:
        return None
    p1, p2 = k_after / n_after, k_before / n_before
    (l1, u1), (l2, u2) = after, before
    product = p1 * p2
    low_root = math.sqrt(max(0.0, product * product - l1 * u2 * (2 * p1 - l1) * (2 * p2 - u2)))
    high_root = math.sqrt(max(0.0, product * product - u1 * l2 * (2 * p1 - u1) * (2 * p2 - l2)))
    low = (product - low_root) / (u2 * (2 * p2 - u2))
    high = (product + high_root) / (l2 * (2 * p2 - l2))
    return p1 / p2, max(0.0, low), high


def mean_and_error(values: Sequence[float]) -> tuple[float, float] | None:
    """Mean and its standard error; None without values."""
    if not values:
        return None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, float("nan")
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(var / len(values))
