"""Statistics used across probes and reports. All of it lives here (docs/measurement-conventions.md).

Pure functions over plain numbers; scipy only where an exact distribution is needed.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

Z95 = 1.959963984540054


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between closest ranks; None if empty.
    A q outside [0, 100] is a caller's mistake, not a percentile: ValueError."""
    if not 0.0 <= q <= 100.0:       # also refuses NaN
        raise ValueError(f"percentile q must be within [0, 100], not {q!r}")
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


# Why a metric must not be judged: its sample cannot bound the percentile's 95% interval.
INTERVAL_UNBOUNDED = "interval_unbounded"
# Why a metric must not be judged: the client did not keep its open-loop level's schedule (prober/probes/load.py).
CLIENT_LIMITED = "client_limited"

# What `prober show` and the report say about each flag, and about percentile intervals. The
# coverages are those measured by simulation (tests/core/test_percentile_intervals.py).
FLAG_NOTES = {
    INTERVAL_UNBOUNDED: "too few requests to bound the percentile's 95% interval (p50 needs 6, p90 36, "
                        "p99 368): shown, never judged by an SLO or a drift test",
    CLIENT_LIMITED: "the client did not keep this open-loop level's schedule (send lag p99 over the limit, or "
                    "achieved rate under 95% of the schedule's): it measured itself, so never judged by an SLO "
                    "or a drift test",
}
PERCENTILE_INTERVAL_NOTE = ("95% CI of a percentile: distribution-free, from order statistics with the request "
                            "as the unit (coverage at least 95%; 95.6-97.1% measured); ITL: a bootstrap over "
                            "requests, n counting requests (93-95% measured)")


@dataclass(frozen=True)
class PercentileEstimate:
    value: float | None      # percentile(values, q)
    low: float | None        # the interval's bounds; None on a side the sample cannot bound
    high: float | None
    n: int                   # the independent units: observations, or requests for pooled ITL gaps

    @property
    def flags(self) -> list[str] | None:
        """["interval_unbounded"] when either side is unbounded (or nothing was observed)."""
        return None if self.low is not None and self.high is not None else [INTERVAL_UNBOUNDED]


def order_statistic_ranks(n: int, q: float, confidence: float = 0.95) -> tuple[int | None, int | None]:
    """1-based ranks (l, u) of the order statistics that bracket the q-th percentile with at least
    `confidence`, distribution-free: with B ~ Binomial(n, q/100) the number of observations below
    the true percentile, P(X_(l) > x_q) = P(B < l) and P(X_(u) < x_q) = P(B >= u), each kept at or
    under (1 - confidence) / 2. None on a side no rank reaches: p99 of 32 observations has no
    upper bound (the maximum is below the true p99 with probability 0.99^32 = 72%)."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be within [0, 100], not {q!r}")
    if n <= 0:
        return None, None
    tail = (1.0 - confidence) / 2
    p = q / 100.0
    # l - 1 = the largest k with P(B <= k) <= tail; u - 1 = the smallest k with P(B <= k) >= 1 - tail.
    below = _binomial_quantile(tail, n, p)          # the smallest k with P(B <= k) >= tail
    low_rank = below if _binomial_cdf(below, n, p) > tail else below + 1
    high_rank = _binomial_quantile(1.0 - tail, n, p) + 1
    return (low_rank if low_rank >= 1 else None), (high_rank if high_rank <= n else None)


def _binomial_cdf(k: int, n: int, p: float) -> float:
    # scipy.special, not scipy.stats: every run summarizes percentiles, and importing scipy.stats
    # costs each `prober` process about half a second of CPU more.
    from scipy.special import bdtr

    return 1.0 if k >= n else float(bdtr(k, n, p))


def _binomial_quantile(level: float, n: int, p: float) -> int:
    """The smallest k in [0, n] with P(B <= k) >= level, B ~ Binomial(n, p) (scipy's binom.ppf)."""
    low, high = 0, n
    while low < high:
        middle = (low + high) // 2
        if _binomial_cdf(middle, n, p) >= level:
            high = middle
        else:
            low = middle + 1
    return low


def percentile_interval(values: Sequence[float], q: float, confidence: float = 0.95) -> PercentileEstimate:
    """The q-th percentile with its distribution-free order-statistic interval (coverage at least
    `confidence` for any continuous distribution, each observation an independent unit)."""
    data = sorted(v for v in values if v is not None and not math.isnan(v))
    low_rank, high_rank = order_statistic_ranks(len(data), q, confidence)
    return PercentileEstimate(percentile(data, q),
                              None if low_rank is None else float(data[low_rank - 1]),
                              None if high_rank is None else float(data[high_rank - 1]), len(data))


def min_n_for_bounded_percentile(q: float, confidence: float = 0.95) -> int:
    """The fewest observations for which the q-th percentile's interval is bounded on both sides."""
    n = 1
    while None in order_statistic_ranks(n, q, confidence):
        n = n * 2
    low = n // 2
    while low + 1 < n:                                # boundedness is monotone in n: bisect
        middle = (low + n) // 2
        if None in order_statistic_ranks(middle, q, confidence):
            low = middle
        else:
            n = middle
    return n


def clustered_percentile_interval(groups: Sequence[Sequence[float]], q: float, confidence: float = 0.95,
                                  resamples: int = 1000, seed: int = 0) -> PercentileEstimate:
    """The q-th percentile of the pooled values of several groups (the inter-token gaps of several
    requests), with a percentile-bootstrap interval that resamples whole groups: gaps of one
    request share its fate (its batch, its queue), so the group is the independent unit and n
    counts groups. Bounded only when as many groups would bound an order-statistic interval of
    independent observations: the pooled values add precision the bootstrap may overstate, and
    fewer groups than that are flagged. Seeded, so a re-summarized run gets the same interval."""
    import numpy as np

    kept = [np.asarray([v for v in g if v is not None and not math.isnan(v)], dtype=float) for g in groups]
    kept = [g for g in kept if g.size]
    pooled = np.concatenate(kept) if kept else np.empty(0)
    value = percentile(pooled.tolist(), q)
    n = len(kept)
    if n == 0 or None in order_statistic_ranks(n, q, confidence):
        return PercentileEstimate(value, None, None, n)
    order = np.argsort(pooled, kind="stable")
    ordered = pooled[order]
    owner = np.repeat(np.arange(n), [g.size for g in kept])[order]
    rng = np.random.default_rng(seed)
    estimates = np.empty(resamples)
    for i in range(resamples):
        # A resample of requests weights each gap by how often its request was drawn; the
        # percentile is the smallest gap whose cumulative weight reaches q% of the total.
        cumulative = np.cumsum(np.bincount(rng.integers(0, n, n), minlength=n)[owner])
        estimates[i] = ordered[min(int(np.searchsorted(cumulative, q / 100.0 * cumulative[-1])), ordered.size - 1)]
    # Hesterberg's expanded percentile interval: the plain percentile bootstrap is too narrow on
    # few units (its spread is the n-divisor one, with normal tails); widen the tails to those of
    # a t with n - 1 degrees of freedom, scaled by sqrt(n / (n - 1)).
    from scipy.special import ndtr, stdtrit  # the normal cdf and Student's t quantile (see _binomial_cdf)

    t_upper = stdtrit(n - 1, 1.0 - (1.0 - confidence) / 2)
    tail = float(ndtr(-math.sqrt(n / (n - 1)) * t_upper)) * 100
    low, high = np.percentile(estimates, [tail, 100 - tail])
    return PercentileEstimate(value, float(low), float(high), n)


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float | None, float | None]:
    """Wilson score interval for a proportion; (None, None) when n is 0."""
    if n <= 0:
        return None, None
    return _wilson(successes, n, z)


def _wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """wilson_interval for n > 0."""
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At 0 or n successes the bound is exactly 0 or 1; the formula leaves rounding dust (5.6e-17).
    low = 0.0 if successes <= 0 else max(0.0, centre - half)
    high = 1.0 if successes >= n else min(1.0, centre + half)
    return low, high


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

    exact = _exact_trend_p(groups, alternative)
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


def _exact_trend_p(groups: list[tuple[int, int, float]], alternative: str) -> float | None:
    """The permutation p-value of T = sum(score * successes) given the total successes, by dynamic
    programming over the groups; None when the scores lie on no integer lattice or the work is
    too large."""
    import numpy as np
    from scipy.stats import binom

    steps = _lattice_steps([s for _, _, s in groups])
    if steps is None:
        return None
    # T on the lattice is an increasing affine function of T on the scores given, so the p-value
    # is the same for 0, 1, 2 and for 0, 0.5, 1: a rescaling of the scores changes nothing.
    shifted = [(x, n, step) for (x, n, _), step in zip(groups, steps)]
    t_obs = sum(x * s for x, _, s in shifted)
    n_all = sum(n for _, n, _ in shifted)
    x_all = sum(x for x, _, _ in shifted)
    expected = x_all / n_all * sum(n * s for _, n, s in shifted)
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
    t_values = np.arange(t_max + 1)
    tolerance = 1e-7 * max(1.0, abs(t_obs))
    if alternative == "increasing":
        p = dist[t_values >= t_obs - tolerance].sum()
    elif alternative == "decreasing":
        p = dist[t_values <= t_obs + tolerance].sum()
    else:
        p = dist[np.abs(t_values - expected) >= abs(t_obs - expected) - tolerance].sum()
    return float(min(1.0, p))


def _lattice_steps(scores: Sequence[float]) -> list[int] | None:
    """The scores as whole steps above the lowest one: offsets from the lowest score in units of
    the smallest offset, then over their common denominator (rational to within 1e-9), so that
    any positive rescaling of the same scores gives the same steps; None when there are none."""
    from fractions import Fraction

    low = min(scores)
    offsets = [float(score) - float(low) for score in scores]
    unit = min((o for o in offsets if o > 0), default=None)
    if unit is None:
        return None
    ratios = []
    for offset in offsets:
        ratio = Fraction(offset / unit).limit_denominator(1000)
        if abs(float(ratio) - offset / unit) > 1e-9 * max(1.0, offset / unit):
            return None
        ratios.append(ratio)
    denominator = math.lcm(*(r.denominator for r in ratios))
    return [int(r * denominator) for r in ratios]


def fisher_exact(successes_1: int, n_1: int, successes_2: int, n_2: int,
                 alternative: Literal["two-sided", "less", "greater"] = "two-sided") -> float | None:
    """Fisher's exact test of two proportions; "greater" means the second group's proportion is
    the greater. None when either group is empty."""
    if n_1 <= 0 or n_2 <= 0:
        return None
    import numpy as np
    from scipy.stats import fisher_exact as scipy_fisher

    table = np.array([[successes_2, n_2 - successes_2], [successes_1, n_1 - successes_1]])
    return float(scipy_fisher(table, alternative=alternative).pvalue)


def proportion_difference(successes_1: int, n_1: int, successes_2: int, n_2: int
                          ) -> tuple[float | None, float | None, float | None]:
    """(second proportion minus the first, low, high) for two independent groups: Newcombe's
    hybrid score interval, built from each group's Wilson interval (Newcombe 1998, method 10), so
    it stays inside [-1, 1] and keeps its coverage at 0 or n successes. All None when a group is empty."""
    if n_1 <= 0 or n_2 <= 0:
        return None, None, None
    p_1, p_2 = successes_1 / n_1, successes_2 / n_2
    difference, low, high = mover_difference((p_1, *_wilson(successes_1, n_1)), (p_2, *_wilson(successes_2, n_2)))
    return difference, max(-1.0, low), min(1.0, high)


def mover_difference(first: tuple[float, float, float], second: tuple[float, float, float]
                     ) -> tuple[float, float, float]:
    """(second minus first, low, high) from each estimate's own (value, low, high) 95% interval:
    the method of variance estimates recovery (Zou & Donner 2008; Newcombe's method 10 for shares
    is this with Wilson intervals). Each side's distance to its bound stands for its spread on that
    side, so skewed intervals (a percentile's order-statistic bounds) keep their shape."""
    (value_1, low_1, high_1), (value_2, low_2, high_2) = first, second
    difference = value_2 - value_1
    return (difference, difference - math.sqrt((value_2 - low_2) ** 2 + (high_1 - value_1) ** 2),
            difference + math.sqrt((high_2 - value_2) ** 2 + (value_1 - low_1) ** 2))


def interval_p(difference: float, low: float, high: float, z: float = Z95) -> float:
    """Two-sided p-value that the difference is 0, read off its 95% interval: the half-width
    towards 0 taken as z standard errors. Below 0.05 exactly when the interval excludes 0."""
    from scipy.stats import norm

    half = difference - low if difference > 0 else high - difference
    if difference == 0 or half <= 0:
        return 1.0 if difference == 0 else 0.0
    return float(min(1.0, 2 * norm.sf(abs(difference) / half * z)))


# --- paired comparisons of two proportions (schema order) ---------------------------------------
# Two variants answer the same items; only the discordant items (right under one, wrong under the
# other) carry information about which is better. `a_only` counts items variant A got right and B
# wrong, `b_only` the reverse.


@dataclass(frozen=True)
class McNemarResult:
    p_value: float    # exact: two-sided binomial test of a_only against a_only + b_only at 1/2
    mid_p: float      # the exact p-value minus the probability of the observed table (Fagerland 2013)


def mcnemar(a_only: int, b_only: int) -> McNemarResult:
    """Exact McNemar test. With no discordant pairs there is no evidence either way: p = mid-p = 1.
    The exact p-value never exceeds its nominal level and is conservative on small tables; the
    mid-p is closer to nominal and is what Fagerland et al. recommend for reporting."""
    if a_only < 0 or b_only < 0:
        raise ValueError("discordant counts must be non-negative")
    discordant = a_only + b_only
    if discordant == 0:
        return McNemarResult(1.0, 1.0)
    import numpy as np
    from scipy.special import gammaln

    # In log space: at a thousand discordant pairs the tail is below 1e-300, and a cdf computed
    # directly underflows to 0 (p = 0, a negative mid-p).
    smaller = min(a_only, b_only)
    k = np.arange(smaller + 1)
    log_pmf = gammaln(discordant + 1) - gammaln(k + 1) - gammaln(discordant - k + 1) - discordant * math.log(2)
    top = log_pmf[-1]                              # the largest term: the pmf rises up to n / 2
    log_tail = top + math.log(float(np.exp(log_pmf - top).sum()))
    log_below = top + math.log(float(np.exp(log_pmf[:-1] - top).sum())) if smaller > 0 else -math.inf
    # mid-p = 2 * P(X <= k) - P(X = k) = 2 * P(X < k) + P(X = k): a sum of positive terms.
    log_mid = float(np.logaddexp(math.log(2) + log_below, top))
    return McNemarResult(p_value=min(1.0, math.exp(math.log(2) + log_tail)), mid_p=min(1.0, math.exp(log_mid)))


def paired_difference(a_only: int, b_only: int, n: int, z: float = Z95
                      ) -> tuple[float | None, float | None, float | None]:
    """(accuracy of A minus accuracy of B, low, high) over `n` paired items: the observed
    difference (a_only - b_only) / n with the Bonett-Price adjusted Wald interval (one pseudo-count
    added to each discordant cell, n + 2 in the denominator), which keeps close to its nominal
    coverage where the plain Wald interval collapses (few or no discordant pairs). All None when n is 0."""
    if n <= 0:
        return None, None, None
    if a_only < 0 or b_only < 0 or a_only + b_only > n:
        raise ValueError("need 0 <= a_only + b_only <= n")
    p_a, p_b = (a_only + 1) / (n + 2), (b_only + 1) / (n + 2)
    centre = p_a - p_b
    half = z * math.sqrt(max(0.0, p_a + p_b - centre * centre) / (n + 2))
    return (a_only - b_only) / n, max(-1.0, centre - half), min(1.0, centre + half)


def mcnemar_items_for_power(a_only: int, b_only: int, n: int, alpha: float = 0.05,
                            power: float = 0.8) -> int | None:
    """Paired items needed for `power` at two-sided level `alpha`, taking the observed discordance
    as the truth: psi = (a_only + b_only) / n discordant, delta = (a_only - b_only) / n difference.
    Connor's (1987) normal approximation, n = (z_a sqrt(psi) + z_b sqrt(psi - delta^2))^2 / delta^2,
    rounded up. None when nothing was observed or the observed difference is zero (no finite n)."""
    if n <= 0 or a_only == b_only:
        return None
    from scipy.stats import norm

    psi, delta = (a_only + b_only) / n, (a_only - b_only) / n
    z_alpha, z_beta = norm.isf(alpha / 2), norm.isf(1 - power)
    needed = (z_alpha * math.sqrt(psi) + z_beta * math.sqrt(max(0.0, psi - delta * delta))) ** 2 / delta ** 2
    return max(1, math.ceil(needed - 1e-9))


def obrien_fleming_bounds(fractions: Sequence[float], alpha: float = 0.05, grid: int = 801) -> list[float]:
    """Two-sided z boundaries of a group-sequential test at the information fractions given
    (increasing, the last normally 1), spending alpha with the Lan-DeMets O'Brien-Fleming-type
    function alpha(t) = 2 - 2 Phi(z_{alpha/2} / sqrt(t)): almost nothing is spent at early looks,
    so only a decisive early result stops a run, and the final look stays close to the fixed-sample
    test. Exact under the canonical joint distribution (independent increments), by numerical
    integration of the score's density over the continuation region on a grid, look by look."""
    import numpy as np
    from scipy.optimize import brentq
    from scipy.stats import norm

    times = [float(t) for t in fractions]
    if not times or any(t <= 0 or t > 1 for t in times) or any(b <= a for a, b in itertools.pairwise(times)):
        raise ValueError("fractions must increase within (0, 1]")
    z_half = norm.isf(alpha / 2)
    spent = [2 * norm.sf(z_half / math.sqrt(t)) for t in times]
    bounds = [float(norm.isf(spent[0] / 2))]
    # Density of the score S_1 ~ N(0, t_1) on the continuation region |S_1| < c_1 sqrt(t_1).
    edge = bounds[0] * math.sqrt(times[0])
    points = np.linspace(-edge, edge, grid)
    density = norm.pdf(points, scale=math.sqrt(times[0]))
    for (previous, time_k), spend in zip(itertools.pairwise(times), np.diff(spent)):
        weights = density * np.gradient(points)         # trapezoid-like weights over the grid
        sigma = math.sqrt(time_k - previous)
        excess = functools.partial(_excess_crossing, time=time_k, points=points, weights=weights, sigma=sigma,
                                   spend=spend)
        if spend <= 0 or excess(40.0) >= 0:
            bound = 40.0      # nothing left to spend here: a bound no test statistic reaches
        else:
            bound = brentq(excess, 1e-6, 40.0, xtol=1e-10)
        bounds.append(float(bound))
        edge = bound * math.sqrt(time_k)
        grown = np.linspace(-edge, edge, grid)
        density = (weights[None, :] * norm.pdf((grown[:, None] - points[None, :]) / sigma) / sigma).sum(axis=1)
        points = grown
    return bounds


def _excess_crossing(bound: float, *, time: float, points: npt.NDArray[np.float64], weights: npt.NDArray[np.float64],
                     sigma: float, spend: float) -> float:
    """P(first crossing of +-bound at this look) minus the alpha to spend there; the continuation
    density so far is given as `weights` at score values `points`, the increment's sd is `sigma`."""
    from scipy.stats import norm

    edge = bound * math.sqrt(time)
    return float((weights * (norm.cdf((-edge - points) / sigma) + norm.sf((edge - points) / sigma))).sum()) - spend


def nominal_alphas(bounds: Sequence[float]) -> list[float]:
    """The two-sided p-value each z boundary corresponds to: a look stops the run when its
    p-value is at or below the look's nominal alpha."""
    from scipy.stats import norm

    return [float(2 * norm.sf(b)) for b in bounds]


# --- drift: rank tests and multiple comparisons (prober/alerting/drift.py) -----------------------------

def benjamini_hochberg(p_values: Sequence[float | None]) -> list[float | None]:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input order; None stays None and
    NaN stays NaN (neither is a test, so neither counts among the m tests).

    A test is a discovery at false discovery rate `q` when its adjusted p-value is <= q.
    """
    indexed = [(p, i) for i, p in enumerate(p_values) if p is not None and not math.isnan(p)]
    adjusted: list[float | None] = [p if p is None else math.nan for p in p_values]
    m = len(indexed)
    running = 1.0
    for rank, (p, i) in reversed(list(enumerate(sorted(indexed), start=1))):
        running = min(running, p * m / rank)
        adjusted[i] = min(1.0, running)
    return adjusted


# --- drift with the night as the unit (prober/alerting/drift.py) ----------------------------------------
# Each baseline run contributes one value; tonight's value is judged against their spread, so the
# night-to-night variation of a real endpoint (load, routing, cache state) is part of the null.

# A latency baseline (log scale) that happened to agree to within 1% must not make any change significant.
LATENCY_LOG_VARIANCE_FLOOR = 0.01 ** 2


# --- nights that are not independent (issue 30) ----------------------------------------------------
#
# A deploy, a traffic pattern or a noisy neighbour lasts days: an endpoint's night values follow
# something like an AR(1) series, x_t = rho x_{t-1} + e_t, not independent draws. Then (1) the
# mean of two consecutive nights varies (1 + rho) / 2 of a night's variance, not 1/2; (2) the
# baseline's sample variance underestimates a night's variance; (3) that estimate is less certain
# than k - 1 degrees of freedom say. Tests that assume independent nights spend several times
# their level at rho 0.5-0.8 (docs/operations.md). The functions below give each of the three.

# Nights judged at most this correlated: beyond, a window of 56 nights holds about one independent
# value, and the estimate of rho itself is mostly noise.
MOST_AUTOCORRELATION = 0.9


def lag1_autocovariance(values: Sequence[float]) -> tuple[float, float]:
    """(variance, lag-1 autocovariance) of a series in time order (either direction), both with
    the series' mean removed and divided by its length, the usual estimator; (0, 0) for fewer than
    3 values."""
    k = len(values)
    if k < 3:
        return 0.0, 0.0
    mean = sum(values) / k
    centred = [v - mean for v in values]
    return (sum(c * c for c in centred) / k,
            sum(a * b for a, b in itertools.pairwise(centred)) / k)


def ar1_coefficient(autocovariance: float, variance: float, k: int) -> float:
    """The AR(1) coefficient that a series of k values with this lag-1 autocovariance and variance
    shows, corrected for the estimator's bias (about -(1 + 4 rho) / k) and held in [0,
    MOST_AUTOCORRELATION]: a negative estimate is taken as independent nights, never as a reason to
    trust the baseline more."""
    if variance <= 0 or k < 3:
        return 0.0
    raw = autocovariance / variance
    return min(MOST_AUTOCORRELATION, max(0.0, raw + (1 + 4 * max(raw, 0.0)) / k))


def ar1_variance_bias(rho: float, k: int, signal: float = 1.0) -> float:
    """E[s^2] / sigma^2 for the sample variance of k consecutive AR(1) values: 1 - 2 / (k (k - 1))
    sum_{j<k} (k - j) rho^j. Dividing s^2 by it estimates a night's own variance. `signal`: the
    share of the values' variance that is the AR(1) series, the rest independent noise (a night's
    share is its night effect plus binomial sampling): the lag-j autocorrelation is then
    signal rho^j, not (signal rho)^j."""
    if rho <= 0 or k < 2:
        return 1.0
    return max(1e-3, 1 - 2 / (k * (k - 1)) * signal * sum((k - j) * rho ** j for j in range(1, k)))


@functools.lru_cache(maxsize=4096)
def _ar1_quadratic_form(rho: float, weights: tuple[float, ...]) -> float:
    """w' R w for consecutive nights' weights w, R_ij = rho^|i - j|: the variance of sum(w x) in
    units of one night's variance."""
    used = [(i, w) for i, w in enumerate(weights) if w]
    return sum(wi * wj * rho ** abs(i - j) for i, wi in used for j, wj in used)


def ar1_window_variance(rho: float, current: int, baseline: int, gap: int = 0) -> float:
    """Var(mean of the `current` newest nights - mean of `baseline` nights that end `gap` nights
    before them) in units of one night's variance, when nights are AR(1) with coefficient rho:
    w' R w with R_ij = rho^|i - j|. 1/current + 1/baseline for independent nights. The newer the
    baseline, the more of a lasting night effect it shares with the current nights: a one-night
    test against the nights just before stays near 1 + 1/k at any rho, while the mean of two
    nights varies (1 + rho) / 2."""
    if rho <= 0:
        return 1 / current + 1 / baseline
    return _ar1_quadratic_form(round(rho, 3), (1 / current,) * current + (0.0,) * gap + (-1 / baseline,) * baseline)


@functools.lru_cache(maxsize=1024)
def _trend_weights(k: int) -> tuple[float, ...]:
    centre = (k - 1) / 2
    spread = sum((i - centre) ** 2 for i in range(k))
    return tuple((i - centre) / spread for i in range(k))


class TrendTest(NamedTuple):
    p_value: float
    slope: float            # per night
    fitted_first: float     # the line's value at the oldest night
    fitted_last: float      # and at the newest
    rho: float


# Fewer nights than this give a slope no budget-sized level can trust.
FEWEST_TREND_NIGHTS = 14


def trend_p(values: Sequence[float], alternative: str, variance_floor: float = 0.0) -> TrendTest | None:
    """The least-squares slope of consecutive nights' values (oldest first) tested against no
    trend: a creep too slow for any two nights to show (+0.5% a night is +20% in 40 nights). Its
    variance is the residuals' (corrected for their lag-1 autocorrelation's bias, at least
    `variance_floor`) times w' R w, w the slope's weights and R the AR(1) correlation of the
    nights, on the degrees of freedom correlated residuals carry, minus the slope's. None with
    fewer than FEWEST_TREND_NIGHTS values or no spread."""
    if alternative not in ("greater", "less"):
        raise ValueError(f"alternative must be greater or less, not {alternative!r}")
    k = len(values)
    if k < FEWEST_TREND_NIGHTS:
        return None
    weights = _trend_weights(k)
    mean = sum(values) / k
    slope = sum(w * v for w, v in zip(weights, values))
    centre = (k - 1) / 2
    residuals = [v - mean - slope * (i - centre) for i, v in enumerate(values)]
    variance, autocovariance = lag1_autocovariance(residuals)
    # A slope's variance grows like (1 + rho) / (1 - rho): an estimate of rho a little low (they
    # are, from 56 residuals: sd about 0.1 at rho 0.8) lets a slow wander page. So one standard
    # error above the estimate.
    estimate = ar1_coefficient(autocovariance, variance, k)
    rho = min(MOST_AUTOCORRELATION, estimate + math.sqrt((1 - estimate ** 2) / k)) if estimate > 0 else 0.0
    night_variance = max(sum(r * r for r in residuals) / (k - 2) / ar1_variance_bias(rho, k), variance_floor)
    if night_variance <= 0:
        return None
    slope_variance = night_variance * (_ar1_quadratic_form(round(rho, 3), weights) if rho > 0
                                       else sum(w * w for w in weights))
    from scipy.special import stdtr

    t = slope / math.sqrt(slope_variance)
    df = max(2.0, ar1_degrees_of_freedom(rho, k) - 1)
    p = float(stdtr(df, -t)) if alternative == "greater" else float(stdtr(df, t))
    return TrendTest(p, slope, mean - slope * centre, mean + slope * centre, rho)


def ar1_degrees_of_freedom(rho: float, k: int, signal: float = 1.0) -> float:
    """Degrees of freedom of a variance estimated from k AR(1) values: the chi-square that has its
    relative variance, Var(s^2) about 2 sigma^4 (1 + 2 sum_j r_j^2) / k with r_j the lag-j
    autocorrelation, rho^j: (1 + rho^2) / (1 - rho^2). k - 1 when independent; never below 2.
    `signal` as in ar1_variance_bias: r_j = signal rho^j."""
    if rho >= 1:
        return 2.0
    return max(2.0, k / (1 + 2 * signal ** 2 * rho ** 2 / (1 - rho ** 2)) - 1)


def _prediction_reach(rho: float, current: int, gap: int) -> tuple[float, float]:
    """(a, da/drho): the share of the newest baseline night's departure from the baseline mean
    that an AR(1) series carries into the mean of the `current` nights after it (`gap` nights
    between), a = mean of rho^h over their steps h, and its derivative in rho."""
    steps = [current + gap - i for i in range(current)]
    return (sum(rho ** h for h in steps) / current,
            sum(h * rho ** (h - 1) for h in steps) / current)


def ar1_prediction_variance(rho: float, current: int, baseline: int, gap: int = 0) -> float:
    """Var(mean of the `current` newest nights - its AR(1) one-step prediction) in units of one
    night's variance: the prediction is the baseline mean plus a (ar1_prediction: the newest
    baseline night's departure from that mean carried forward), so the weights are 1/current on
    the window, -a - (1 - a)/baseline on the newest baseline night and -(1 - a)/baseline on the
    others, and the variance w' R w. At rho 0 it is 1/current + 1/baseline; at rho 0.5 and two
    nights against 56, 0.62 where the plain difference of means (ar1_window_variance) has 0.78,
    and 0.40 at rho 0.8 where that has 0.93: a night effect that lasts is partly known."""
    if rho <= 0:
        return 1 / current + 1 / baseline
    a, _ = _prediction_reach(rho, current, gap)
    weights = ((1 / current,) * current + (0.0,) * gap + (-a - (1 - a) / baseline,)
               + (-(1 - a) / baseline,) * (baseline - 1))
    return _ar1_quadratic_form(round(rho, 3), weights)


class SerialPrediction(NamedTuple):
    predicted: float        # the window's mean as the baseline predicts it
    variance: float         # a night's variance (at least the floor)
    window: float           # the prediction error's variance in units of it
    df: float
    rho: float


def serial_prediction(current: int, baseline: Sequence[float], gap: int = 0,
                      variance_floor: float = 0.0) -> SerialPrediction:
    """The AR(1) one-step prediction of the mean of the `current` nights that follow `baseline`
    (consecutive nights, newest first; `gap` nights between its newest and the window's oldest):
    the baseline mean plus a (rho^h averaged over the window's steps) times the newest night's
    departure from it. A night effect that lasts (a deploy, a noisy neighbour) is carried into
    tonight's prediction rather than read as drift, and what it leaves to chance is the
    innovations' variance, estimated from the k - 1 one-step residuals (k - 3 degrees of freedom),
    where a night's own variance from k autocorrelated values has few (ar1_degrees_of_freedom: 14
    of 56 at rho 0.8). The window's variance adds the uncertainty of the estimated rho (about
    (1 - rho^2) / k) through a's slope, times the newest night's departure squared. With no
    autocorrelation shown (rho 0) it is the plain prediction interval: the sample variance on
    k - 1 degrees of freedom, window 1/current + 1/k."""
    k = len(baseline)
    mean = sum(baseline) / k
    variance, autocovariance = lag1_autocovariance(baseline)
    rho = ar1_coefficient(autocovariance, variance, k)
    if rho <= 0 or k < 5:
        s2 = sum((v - mean) ** 2 for v in baseline) / (k - 1)
        return SerialPrediction(mean, max(s2, variance_floor), 1 / current + 1 / k, k - 1, 0.0)
    residuals = [(newer - mean) - rho * (older - mean) for newer, older in itertools.pairwise(baseline)]
    night = sum(r * r for r in residuals) / (k - 3) / (1 - rho ** 2)
    night = max(night, variance_floor)
    a, slope = _prediction_reach(rho, current, gap)
    departure = baseline[0] - mean
    window = (ar1_prediction_variance(rho, current, k, gap)
              + departure ** 2 / night * (1 - rho ** 2) / k * slope ** 2)
    return SerialPrediction(mean + a * departure, night, window, k - 3, rho)


def serial_baseline(baseline: Sequence[float]) -> tuple[float, float, float, float]:
    """(mean, night variance, rho, degrees of freedom) of a baseline of consecutive nights: the
    sample variance corrected for the autocorrelation the values show."""
    k = len(baseline)
    mean = sum(baseline) / k
    s2 = sum((v - mean) ** 2 for v in baseline) / (k - 1)
    variance, autocovariance = lag1_autocovariance(baseline)
    rho = ar1_coefficient(autocovariance, variance, k)
    return mean, s2 / ar1_variance_bias(rho, k), rho, ar1_degrees_of_freedom(rho, k)


def night_prediction_p(current: Sequence[float], baseline: Sequence[float], variance_floor: float = 0.0,
                       alternative: str = "two-sided", serial: bool = False,
                       gap: int = 0) -> tuple[float | None, float | None]:
    """(p, standard error) that the mean of `current` (one value per recent night) comes from the
    distribution the `baseline` values (one per earlier night) were drawn from: the Student-t
    prediction interval of a normal sample, t = (mean(current) - mean(baseline)) / sqrt(s^2 (1/m +
    1/k)) on k - 1 degrees of freedom. `alternative`: "two-sided", "greater" (the current mean is
    higher) or "less". `variance_floor` bounds s^2 from below (a baseline that happened to agree
    closely must not make any change significant). None when the baseline has fewer than 3 values
    (an interval on 1 degree of freedom is no test) or no spread.

    `serial`: the values are consecutive nights, `current` the newest (newest first) and
    `baseline` the ones `gap` nights before them (newest first): the test takes the
    autocorrelation the baseline shows into its variance, its window variance and its degrees of
    freedom (serial_baseline, ar1_window_variance); on independent nights it is the test above."""
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be two-sided, greater or less, not {alternative!r}")
    k, m = len(baseline), len(current)
    if k < 3 or m < 1:
        return None, None
    if serial:
        found = serial_prediction(m, baseline, gap, variance_floor)
        mean, variance, window, df = found.predicted, found.variance, found.window, found.df
    else:
        mean = sum(baseline) / k
        variance, df, window = sum((v - mean) ** 2 for v in baseline) / (k - 1), k - 1, 1 / m + 1 / k
    variance = max(variance, variance_floor)
    if variance <= 0:
        return None, None
    # Student's t cdf from scipy.special, what scipy.stats.t.cdf and .sf compute (stdtr(df, t) and
    # stdtr(df, -t)) without importing scipy.stats: half a second of CPU for a process that only
    # evaluates a run (see _binomial_cdf).
    from scipy.special import stdtr

    se = math.sqrt(variance * window)
    t = (sum(current) / m - mean) / se
    if alternative == "greater":
        return float(stdtr(df, -t)), se
    if alternative == "less":
        return float(stdtr(df, t)), se
    return float(min(1.0, 2 * stdtr(df, -abs(t)))), se


def night_shift_detectable(baseline: Sequence[float], alpha_two_nights: float, power: float = 0.9,
                           variance_floor: float = 0.0, each_night_p: float | None = None) -> float | None:
    """The smallest shift of a night-level value (log scale for latency) that the two-night test
    (the mean of two shifted nights against `baseline`, one-sided at `alpha_two_nights`) finds
    with probability `power`, taking the baseline's spread as the night-to-night sd (see
    shift_detectable), with the autocorrelation the baseline shows as the drift test takes it
    (serial_baseline). None with fewer than 3 baseline values or no spread."""
    k = len(baseline)
    if k < 3:
        return None
    _, variance, rho, _ = serial_baseline(baseline)
    return shift_detectable(max(variance, variance_floor), k, alpha_two_nights, power, rho, each_night_p)


def _expected_prediction_variance(rho: float, current: int, k: int, gap: int = 0) -> float:
    """serial_prediction's window variance at a newest baseline night one night sd from the mean."""
    if rho <= 0 or k < 5:
        return 1 / current + 1 / k
    _, slope = _prediction_reach(rho, current, gap)
    return ar1_prediction_variance(rho, current, k, gap) + (1 - rho ** 2) / k * slope ** 2


def shift_detectable(variance: float, k: int, alpha_two_nights: float, power: float = 0.9,
                     rho: float = 0.0, each_night_p: float | None = None) -> float | None:
    """The shift d with P(mean of 2 nights - its prediction > t s sqrt(W)) = power for a baseline
    of k nights with night variance s^2: d = s sqrt(W) (t_{alpha, df} + z_power), the mean of two
    shifted nights normal around d; W = 1/2 + 1/k and df = k - 1 for independent nights; at `rho`
    the one-step prediction's W (ar1_prediction_variance, plus the uncertainty of rho at a newest
    night one sd from the mean) on k - 3 degrees of freedom, as the drift test (serial_prediction).
    `each_night_p`: the window pages only when each of its two nights alone also lies beyond the
    baseline's (1 - each_night_p) quantile; d then solves P(window) P(one night)^2 = power (the
    events are positively correlated, so the product, and the d it gives, err on the safe side).
    None with fewer than 3 nights, no spread, or a level or power outside (0, 1)."""
    if k < 3 or variance <= 0 or not 0 < alpha_two_nights < 1 or not 0 < power < 1:
        return None
    from scipy.special import ndtr, ndtri, stdtrit

    window_sd = math.sqrt(variance * _expected_prediction_variance(rho, 2, k))
    t = float(stdtrit(k - 3 if rho > 0 and k >= 5 else k - 1, 1 - alpha_two_nights))
    shift = window_sd * (t + float(ndtri(power)))
    if each_night_p is None:
        return shift
    # the later of the two nights, one step further from the baseline than the other
    night_sd = math.sqrt(variance * _expected_prediction_variance(rho, 1, k, gap=1))
    night_z = float(ndtri(1 - each_night_p))

    def paged(d: float) -> float:
        return float(ndtr(d / window_sd - t)) * float(ndtr(d / night_sd - night_z)) ** 2

    low, high = shift, 2 * shift + 4 * night_sd
    for _ in range(60):        # bisection: paged() rises with d
        middle = (low + high) / 2
        low, high = (middle, high) if paged(middle) < power else (low, middle)
    return high


def pearson_terms(successes: Sequence[int], totals: Sequence[int]) -> list[float] | None:
    """(x_i - n_i p)^2 / (n_i p (1 - p)) per group with n_i > 0, p the pooled share: the terms of
    Pearson's X^2. None when the pooled share is 0 or 1 (no spread to measure) or nothing was tried."""
    groups = [(x, n) for x, n in zip(successes, totals) if n > 0]
    total = sum(n for _, n in groups)
    pooled = sum(x for x, _ in groups) / total if total else 0.0
    if pooled <= 0 or pooled >= 1:
        return None
    return [(x - n * pooled) ** 2 / (n * pooled * (1 - pooled)) for x, n in groups]


def beta_binomial_tail(successes: int, n: int, mean: float, variance_factor: float,
                       alternative: str = "two-sided") -> float:
    """P-value of `successes` of `n` under the beta-binomial with share `mean` whose variance is
    `variance_factor` times the binomial n p (1 - p) (1: the binomial itself). Exact tail sums of
    the distribution, not a normal approximation, so that counts near 0 or n on a few trials keep
    their level. `alternative`: "greater" P(X >= x), "less" P(X <= x), "two-sided" twice the
    smaller, at most 1. The factor is capped just below n (the most a beta-binomial can spread)."""
    return beta_binomial_tails(successes, n, mean, [variance_factor], alternative)[0]


def beta_binomial_tails(successes: int, n: int, mean: float, variance_factors: Sequence[float],
                        alternative: str = "two-sided") -> list[float]:
    """beta_binomial_tail at each of `variance_factors`, computed together: the drift tests ask
    for a dozen factors per count, and one array operation over all of them costs about what one
    factor alone did."""
    return beta_binomial_tails_at(successes, n, [mean] * len(variance_factors), variance_factors, alternative)


def beta_binomial_tails_at(successes: int, n: int, means: Sequence[float], variance_factors: Sequence[float],
                           alternative: str = "two-sided") -> list[float]:
    """beta_binomial_tails with a mean of its own for each factor (serial_share's prediction
    differs with the dispersion it is made at)."""
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be two-sided, greater or less, not {alternative!r}")
    import numpy as np
    from scipy.special import bdtr, bdtrc, betaln, gammaln

    centre = np.asarray(means, dtype=np.float64)
    if n <= 0 or np.any(centre <= 0) or np.any(centre >= 1):
        raise ValueError("need 0 < mean < 1 and n > 0")
    factors = np.asarray(variance_factors, dtype=np.float64)
    upper, lower = np.empty(len(factors)), np.empty(len(factors))
    binomial = (factors <= 1 + 1e-9) | (n == 1)
    if binomial.any():
        upper[binomial] = 1.0 if successes <= 0 else bdtrc(successes - 1, n, centre[binomial])
        lower[binomial] = bdtr(successes, n, centre[binomial]) if successes < n else 1.0
    if not binomial.all():
        # (s + n) / (s + 1) = variance_factor for a beta(mean s, (1 - mean) s) mixing distribution.
        factor = np.minimum(factors[~binomial], n - 1e-6)[:, None]
        strength = (n - factor) / (factor - 1)
        mean = centre[~binomial][:, None]
        a, b = mean * strength, (1 - mean) * strength
        k = np.arange(n + 1)
        log_pmf = (gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
                   + betaln(k + a, n - k + b) - betaln(a, b))
        pmf = np.exp(log_pmf)
        upper[~binomial], lower[~binomial] = pmf[:, max(0, successes):].sum(axis=1), pmf[:, :successes + 1].sum(axis=1)
    if alternative == "greater":
        tails = upper
    elif alternative == "less":
        tails = lower
    else:
        tails = 2 * np.minimum(upper, lower)
    return [min(1.0, float(tail)) for tail in tails]


@functools.lru_cache(maxsize=256)
def _chi2_midpoint_quantiles(df: int, nodes: int) -> tuple[float, ...]:
    import numpy as np
    from scipy.special import gammaincinv  # what scipy.stats.chi2.ppf computes (see night_prediction_p)

    # chi2.ppf(p, df) = 2 gammaincinv(df / 2, p)
    return tuple(float(q) for q in 2 * gammaincinv(df / 2, np.array([(i + 0.5) / nodes for i in range(nodes)])))


# Points of the dispersion's distribution averaged over (equal-probability midpoints).
DISPERSION_NODES = 12


def share_night_p(successes: int, n: int, base_successes: Sequence[int], base_totals: Sequence[int],
                  alternative: str = "two-sided", nights: int = 1, serial: bool = False,
                  gap: int = 0) -> float | None:
    """P-value that tonight's x of n comes from the night-to-night distribution the baseline runs'
    shares show: the beta-binomial predictive of tonight's count. Its mean is the pooled baseline
    share with half a success added (an all-zero baseline still allows a little); its variance
    adds the between-night spread (intra-night correlation rho from Pearson's dispersion
    phi = 1 + (m - 1) rho at the baseline runs' mean size m, never below 0) and the uncertainty of
    the pooled share itself (phi p (1 - p) / N). phi is known only from the baseline's Pearson
    X^2, and a plug-in estimate under-covers at strict levels, as a normal quantile does for a t
    one: the tail is averaged over the values of phi that X^2 allows (X^2 ~ c chi2(df), df from the
    spread of its terms, at most k - 1) at DISPERSION_NODES equal-probability points, each at
    least 1. When x of n are the counts of `nights` runs together, each run has its own night
    effect: the correlation spans n / nights trials, not n. None with fewer than 3 baseline runs.

    `serial`: the runs are consecutive nights, newest first, the baseline ending `gap` nights
    before tonight's: the night effects' lag-1 autocorrelation (from the baseline shares'
    autocovariance over their between-night variance) corrects phi for its bias, caps its degrees
    of freedom, and adds the covariances of the night effects to the predictive's variance
    (ar1_window_variance): the `nights` runs together vary more, the baseline's share less
    independently of tonight's. The predictive's mean then carries the newest baseline night's
    night effect into the window (_share_carried); its variance stays the plain window's."""
    k, total = len(base_totals), sum(base_totals)
    if n <= 0 or k < 3 or total <= 0:
        return None
    share = (sum(base_successes) + 0.5) / (total + 1)
    size = total / k
    terms = pearson_terms(base_successes, base_totals)
    rho, bias, most_df = 0.0, 1.0, float(k)
    if serial and terms is not None and size > 1:
        # The observed shares' autocorrelation (night effect and sampling noise together) sets the
        # bias and the certainty of X^2, a sum of their squares; the night effects' own, larger by
        # the observed variance over the between-night part, their covariances. That ratio is
        # large when nights barely vary, but then the covariances weigh as little as the
        # between-night variance does.
        pooled = sum(base_successes) / total
        between = (sum(terms) / (len(terms) - 1) - 1) * pooled * (1 - pooled) / size
        shares = [x / t for x, t in zip(base_successes, base_totals) if t > 0]
        variance, autocovariance = lag1_autocovariance(shares)
        observed = ar1_coefficient(autocovariance, variance, len(shares))
        rho = min(MOST_AUTOCORRELATION, observed * variance / between) if between > 0 else 0.0
        # The shares' lag-j autocorrelation is (between / variance) rho^j, the night effects' decay
        # under the sampling noise: taken as observed^j, a wander at rho 0.8 left 19 degrees of
        # freedom to a dispersion that 56 nights estimate on about 15, and the strict tails paged
        # (bench/alarm_calibration.py, "low rho 0.8": JSON validity near 0.98)
        signal = min(1.0, observed / rho) if rho > 0 else 0.0
        bias, most_df = ar1_variance_bias(rho, k, signal), ar1_degrees_of_freedom(rho, k, signal)
    if terms is not None and len(terms) >= 2:
        # X^2 is phi chi2(df) with df matched to its spread (Satterthwaite): skewed night-to-night
        # variation makes the Pearson terms heavy-tailed and the estimate of phi less certain than
        # k - 1 normal terms would, so df shrinks below k - 1.
        g = len(terms)
        mean = sum(terms) / g
        spread = sum((t - mean) ** 2 for t in terms) / (g - 1)
        df = max(2, round(min((g - 1) * min(1.0, 2 * mean ** 2 / spread if spread > 0 else 1.0), most_df)))
        # X^2 ~ c chi2(df) with c df = (g - 1) phi: phi = X^2 df / ((g - 1) chi2(df)), low by the
        # autocorrelation's bias
        dispersions = [max(1.0, sum(terms) * df / ((g - 1) * q) / bias)
                       for q in _chi2_midpoint_quantiles(df, DISPERSION_NODES)]
    else:
        dispersions = [1.0]       # a baseline at 0 or 1 shows no spread to measure
    # The night effects' covariances beyond independent nights', per unit of between-night share
    # variance (0 when rho is)
    covariance = ar1_window_variance(rho, nights, k, gap) - (1 / nights + 1 / k)
    means = [share] * len(dispersions)
    if rho > 0 and size > 1 and base_totals[0] > 0:
        means = _share_carried(share, size, rho, nights, gap, base_successes[0] / base_totals[0], base_totals[0],
                               dispersions)
    factors = [1 + ((n / nights - 1) + n * covariance) * ((phi - 1) / (size - 1) if size > 1 else 0.0)
               + n * phi / total for phi in dispersions]
    tails = beta_binomial_tails_at(successes, n, means, factors, alternative)
    return sum(tails) / len(tails)


def _share_carried(share: float, size: float, rho: float, nights: int, gap: int, newest: float, newest_n: int,
                   dispersions: Sequence[float]) -> list[float]:
    """share_night_p's predictive mean per dispersion phi: the pooled share plus the part of the
    newest baseline night's departure from it that its night effect carries into the window under
    AR(1): a g (newest - share), a the mean of rho^h over the window's steps, g = B / (B + p q /
    newest_n) the share of that night's departure that is night effect (B = (phi - 1) p q / (size
    - 1)), held within (0, 1)."""
    pq = share * (1 - share)
    a, _ = _prediction_reach(rho, nights, gap)
    means = []
    for phi in dispersions:
        between = (phi - 1) * pq / (size - 1)
        gain = between / (between + pq / newest_n) if between > 0 else 0.0
        means.append(min(1 - 1e-9, max(1e-9, share + a * gain * (newest - share))))
    return means


def first_crossing(levels: Sequence[float], values: npt.NDArray[np.float64], factor: float) -> npt.NDArray[np.float64]:
    """Per column of `values` (a row per level, levels ascending): the lowest level whose value
    exceeds `factor` times the first level's; inf in a column where none does."""
    import numpy as np

    if len(levels) < 2:
        return np.full(values.shape[1], np.inf)
    exceeds = values[1:] > factor * values[:1]
    crossing = np.asarray(levels, dtype=float)[1:][np.argmax(exceeds, axis=0)]
    return np.where(exceeds.any(axis=0), crossing, np.inf)


@dataclass(frozen=True)
class KneeEstimate:
    value: float | None      # the knee level; None when no level crosses
    low: float | None        # interval bounds; high None: a knee beyond the levels tried stays plausible
    high: float | None
    n: int                   # levels


def knee_interval(values_by_level: Mapping[float, Sequence[float]], factor: float = 2.0, confidence: float = 0.95,
                  resamples: int = 1000, seed: int = 0) -> KneeEstimate:
    """The knee of a sweep (the lowest level whose median exceeds `factor` times the first level's)
    with a percentile-bootstrap interval: each level's requests are resampled on their own (the
    request is the unit), the knee found again per resample, and the interval is the central
    `confidence` share of those knees, with "no knee" counted as beyond the last level (the high
    side then unbounded). Seeded, so a re-summarized run gets the same interval."""
    import numpy as np

    levels = sorted(level for level, values in values_by_level.items() if len(values))
    if not levels:
        return KneeEstimate(None, None, None, 0)
    data = [np.asarray(values_by_level[level], dtype=float) for level in levels]
    point = first_crossing(levels, np.array([[np.median(d)] for d in data]), factor)[0]
    rng = np.random.default_rng(seed)
    medians = np.array([np.median(d[rng.integers(0, d.size, (resamples, d.size))], axis=1) for d in data])
    knees = first_crossing(levels, medians, factor)
    tail = (1.0 - confidence) / 2
    low = float(np.quantile(knees, tail, method="lower"))
    high = float(np.quantile(knees, 1.0 - tail, method="higher"))
    return KneeEstimate(None if np.isinf(point) else float(point), None if np.isinf(low) else low,
                        None if np.isinf(high) else high, len(levels))
