"""Statistics used across probes and reports. All of it lives here (DESIGN.md).

Pure functions over plain numbers; scipy only where an exact distribution is needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between closest ranks; None if empty."""
    data = sorted(v for v in values if v is not None and not math.isnan(v))
    if not data:
        return None
    if len(data) == 1:
        return float(data[0])
    rank = (q / 100.0) * (len(data) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(data) - 1)
    frac = rank - low
    return float(data[low] + (data[high] - data[low]) * frac)


def median(values: Sequence[float]) -> float | None:
    return percentile(values, 50)


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float | None, float | None]:
    """Wilson score interval for a proportion; (None, None) when n is 0."""
    if n <= 0:
        return None, None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def proportion(successes: int, n: int) -> tuple[float | None, float | None, float | None]:
    """(share, wilson_low, wilson_high); all None when n is 0."""
    if n <= 0:
        return None, None, None
    low, high = wilson_interval(successes, n)
    return successes / n, low, high


# --- trend and two-group tests on proportions ---------------------------------------------------

# The exact trend test enumerates a table of (successes, statistic) states per group; above this
# many cell updates it falls back to the normal approximation.
_EXACT_TREND_WORK_LIMIT = 50_000_000


@dataclass(frozen=True)
class TrendResult:
    z: float | None          # the asymptotic Cochran-Armitage statistic; None when it is undefined
    p_value: float | None    # None when fewer than two groups have observations
    exact: bool              # p_value is the exact conditional (permutation) p-value


def cochran_armitage(successes: Sequence[int], totals: Sequence[int], scores: Sequence[float] | None = None,
                     alternative: str = "increasing") -> TrendResult:
    """Cochran-Armitage test for a trend in proportions across ordered groups.

    `scores` default to the groups' ranks 0, 1, 2, ...; `alternative` is "increasing" (the
    proportion grows with the score), "decreasing" or "two-sided". The p-value is exact, computed
    from the distribution of sum(score * successes) given the total number of successes (the
    permutation distribution), whenever the scores are integers and the enumeration is small
    enough; otherwise it is the normal approximation. The exact p-value never exceeds its nominal
    level, which matters here: divergence counts are often a handful, where the normal
    approximation is not to be trusted. With no variation at all (no successes, or no failures)
    there is no evidence of a trend: z is None and p is 1.
    """
    if alternative not in ("increasing", "decreasing", "two-sided"):
        raise ValueError(f"alternative must be increasing, decreasing or two-sided, not {alternative!r}")
    scores = list(range(len(totals))) if scores is None else list(scores)
    if not len(successes) == len(totals) == len(scores):
        raise ValueError("successes, totals and scores must have the same length")
    groups = [(int(x), int(n), s) for x, n, s in zip(successes, totals, scores) if n > 0]
    if any(x < 0 or x > n for x, n, _ in groups):
        raise ValueError("each group needs 0 <= successes <= total")
    if len(groups) < 2:
        return TrendResult(None, None, False)
    n_all = sum(n for _, n, _ in groups)
    x_all = sum(x for x, _, _ in groups)
    share = x_all / n_all
    mean_score = sum(n * s for _, n, s in groups) / n_all
    t_obs = sum(x * s for x, _, s in groups)
    expected = share * sum(n * s for _, n, s in groups)
    variance = share * (1 - share) * sum(n * (s - mean_score) ** 2 for _, n, s in groups)
    if variance <= 0:
        return TrendResult(None, 1.0, False)
    z = (t_obs - expected) / math.sqrt(variance)

    exact = _exact_trend_p(groups, t_obs, expected, alternative)
    if exact is not None:
        return TrendResult(z, exact, True)
    from scipy.stats import norm

    if alternative == "increasing":
        p = norm.sf(z)
    elif alternative == "decreasing":
        p = norm.cdf(z)
    else:
        p = 2 * norm.sf(abs(z))
    return TrendResult(z, float(min(1.0, p)), False)


def _exact_trend_p(groups: list[tuple[int, int, float]], t_obs: float, expected: float,
                   alternative: str) -> float | None:
    """The permutation p-value of T = sum(score * successes) given the total successes, by dynamic
    programming over the groups; None when the scores are not integers or the work is too large."""
    import numpy as np
    from scipy.stats import binom

    if any(float(s) != int(s) for _, _, s in groups):
        return None
    low = min(int(s) for _, _, s in groups)
    shifted = [(x, n, int(s) - low) for x, n, s in groups]       # scores from 0: T shifts by low * X
    n_all = sum(n for _, n, _ in shifted)
    x_all = sum(x for x, _, _ in shifted)
    s_max = max(s for _, _, s in shifted)
    t_max = s_max * x_all
    work = (x_all + 1) * (t_max + 1) * sum(min(n, x_all) + 1 for _, n, _ in shifted)
    if work > _EXACT_TREND_WORK_LIMIT:
        return None
    # Weights proportional to C(n, x); the binomial pmf at the pooled share keeps them in range
    # and scales every table with the same total by the same constant, which cancels.
    share = x_all / n_all
    table = np.zeros((x_all + 1, t_max + 1))
    table[0, 0] = 1.0
    for _, n, s in shifted:
        weights = binom.pmf(np.arange(min(n, x_all) + 1), n, share)
        grown = np.zeros_like(table)
        for x, weight in enumerate(weights):
            if weight == 0.0:
                continue
            grown[x:, s * x:] += weight * table[:x_all + 1 - x, :t_max + 1 - s * x]
        table = grown
    dist = table[x_all]
    dist = dist / dist.sum()
    t_values = np.arange(t_max + 1) + low * x_all
    tolerance = 1e-7 * max(1.0, abs(t_obs))
    if alternative == "increasing":
        p = dist[t_values >= t_obs - tolerance].sum()
    elif alternative == "decreasing":
        p = dist[t_values <= t_obs + tolerance].sum()
    else:
        p = dist[np.abs(t_values - expected) >= abs(t_obs - expected) - tolerance].sum()
    return float(min(1.0, p))


def fisher_exact(successes_1: int, n_1: int, successes_2: int, n_2: int,
                 alternative: str = "two-sided") -> float | None:
    """Fisher's exact test of two proportions; "greater" means the second group's proportion is
    the greater. None when either group is empty."""
    if n_1 <= 0 or n_2 <= 0:
        return None
    from scipy.stats import fisher_exact as scipy_fisher

    table = [[successes_2, n_2 - successes_2], [successes_1, n_1 - successes_1]]
    return float(scipy_fisher(table, alternative=alternative).pvalue)
