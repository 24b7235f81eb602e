"""Comparing two versions' episodes with a stated statistical margin.

Two questions, both from a handful of noisy episodes:

- the canary (``tether.versions.stages.canary``): is the candidate *shown* worse than its
  control on the same tasks? Per-pair differences (:func:`paired_difference`), whose
  standard error leaves out what the pairs share, with a Student-t multiplier
  (:func:`student_t_quantile`) at a family-wise quantile (:func:`family_quantile`);
- the rollback monitor: is the live version clearly worse than the last-known-good one?
  Unpaired windows of two periods, a normal-approximation bound on the difference of
  means (Welch standard error): for a higher-is-better metric the live version counts as
  degraded when even the *upper* bound ``diff + z * se`` is below ``-margin``
  (:func:`clearly_worse`). Rates (success, interventions per step) are compared the
  same way over per-episode values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from pydantic import Field

from tether.versions.records import EpisodeOutcome, Measurement

# Per-episode metrics: how to read one from an outcome, and whether higher is better.
EPISODE_METRICS: dict[str, tuple[Callable[[EpisodeOutcome], float], bool]] = {
    "return": (lambda o: o.episode_return, True),
    "success": (lambda o: float(o.success), True),
    "intervention_rate": (lambda o: o.intervention_rate, False),
    "backup_rate": (lambda o: o.backup_rate, False),
}

# One-sided 95 % confidence: the multiplier of the standard error every stage and the
# rollback monitor use unless configured otherwise.
Z_95 = 1.645


def confidence_z() -> Any:
    """The ``z`` field of a config that compares episodes (one declaration for all)."""
    return Field(
        default=Z_95,
        ge=0.0,
        description="One-sided confidence multiplier; 1.645 is 95% (std errors)",
    )


@dataclass(frozen=True)
class Difference:
    """``mean(a) - mean(b)`` and its confidence half-width ``z * se``."""

    diff: float
    half_width: float
    n_a: int
    n_b: int

    @property
    def lower(self) -> float:
        return self.diff - self.half_width

    @property
    def upper(self) -> float:
        return self.diff + self.half_width


def mean_difference(a: Sequence[float], b: Sequence[float], *, z: float) -> Difference:
    """The difference of means of ``a`` and ``b`` with its one-sided ``z`` half-width.

    Either side needs at least one value. With a single value its variance is unknown;
    it counts as zero, so callers set minimum sample counts in their configs.
    """
    if not a or not b:
        raise ValueError(
            f"mean_difference needs at least one value on each side, got {len(a)} and {len(b)}"
        )
    ma, mb = _mean(a), _mean(b)
    se = math.sqrt(_var(a, ma) / len(a) + _var(b, mb) / len(b))
    return Difference(ma - mb, z * se, len(a), len(b))


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


def _var(xs: Sequence[float], mean: float) -> float:
    if len(xs) < 2:
        return 0.0
    return math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1)


def clearly_worse(
    name: str,
    current: Sequence[float],
    reference: Sequence[float],
    *,
    margin: float,
    z: float,
    higher_is_better: bool,
) -> Measurement:
    """Degradation: a Measurement that *fails* only when ``current`` is clearly worse.

    Higher-is-better: the upper bound of ``current - reference`` must stay ``>= -margin``;
    lower-is-better: the lower bound must stay ``<= margin``. Noise alone does not fail it.
    """
    d = mean_difference(current, reference, z=z)
    if higher_is_better:
        return Measurement(f"{name}_diff_upper_bound", d.upper, -margin, ">=")
    return Measurement(f"{name}_diff_lower_bound", d.lower, margin, "<=")


def paired_difference(diffs: Sequence[float], *, z: float) -> Difference:
    """The mean of paired differences ``a_i - b_i`` with its one-sided ``z`` half-width.

    Pairs share their task (common random numbers), so the variance the two sides
    share drops out: the standard error is ``sd(diffs) / sqrt(n)``.
    """
    return mean_difference(diffs, [0.0], z=z)


def family_quantile(false_rejection_rate: float, tests: int) -> float:
    """The one-sided probability each of ``tests`` criteria is held to so that together
    they fail an unchanged candidate at most ``false_rejection_rate`` of the time
    (Bonferroni)."""
    if not 0.0 < false_rejection_rate < 1.0 or tests < 1:
        raise ValueError(
            f"false_rejection_rate must be in (0, 1) and tests >= 1, got "
            f"{false_rejection_rate} and {tests}"
        )
    return 1.0 - false_rejection_rate / tests


def student_t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (``p`` >= 0.5).

    The Cornish-Fisher expansion of Abramowitz & Stegun 26.7.5 around the normal quantile;
    within 1 % of the exact value from ``df`` = 3 on at the quantiles the gate uses. With
    few pairs the normal quantile understates the bound and fails an unchanged
    candidate more often than stated.
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    z = NormalDist().inv_cdf(p)
    g = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    )
    return z + math.fsum(gk / float(df) ** (k + 1) for k, gk in enumerate(g))


def compare_episodes(
    test: Callable[..., Measurement],
    current: Sequence[EpisodeOutcome],
    reference: Sequence[EpisodeOutcome],
    margins: Sequence[tuple[str, float]],
    *,
    z: float,
) -> tuple[Measurement, ...]:
    """Apply ``test`` (e.g. :func:`clearly_worse`) to each named metric.

    ``margins`` pairs a name of :data:`EPISODE_METRICS` with its margin.
    """
    out = []
    for name, margin in margins:
        read, higher_is_better = EPISODE_METRICS[name]
        out.append(
            test(
                name,
                [read(o) for o in current],
                [read(o) for o in reference],
                margin=margin,
                z=z,
                higher_is_better=higher_is_better,
            )
        )
    return tuple(out)
