"""The trend and exact tests the divergence suite relies on, checked against brute force and for
calibration: a trend test that cries wolf would page someone every night."""

import itertools
import math
import random

import pytest

from prober.core import stats

pytestmark = pytest.mark.unit


def _brute_force_trend_p(successes, totals, scores, alternative):
    """The permutation p-value by enumerating every table with the observed margins."""
    x_all = sum(successes)
    t_obs = sum(x * s for x, s in zip(successes, scores))
    expected = x_all / sum(totals) * sum(n * s for n, s in zip(totals, scores))
    total = hit = 0
    for table in itertools.product(*(range(n + 1) for n in totals)):
        if sum(table) != x_all:
            continue
        weight = math.prod(math.comb(n, x) for n, x in zip(totals, table))
        t = sum(x * s for x, s in zip(table, scores))
        total += weight
        if alternative == "increasing":
            hit += weight * (t >= t_obs)
        elif alternative == "decreasing":
            hit += weight * (t <= t_obs)
        else:
            hit += weight * (abs(t - expected) >= abs(t_obs - expected) - 1e-9)
    return hit / total


def test_exact_trend_p_value_equals_brute_force_enumeration():
    rng = random.Random(5)
    checked = 0
    while checked < 150:
        k = rng.randint(2, 4)
        totals = [rng.randint(1, 6) for _ in range(k)]
        successes = [rng.randint(0, n) for n in totals]
        scores = [rng.randint(-2, 5) for _ in range(k)]
        for alternative in ("increasing", "decreasing", "two-sided"):
            result = stats.cochran_armitage(successes, totals, scores, alternative)
            if result.z is None:
                continue
            assert result.exact
            expected = _brute_force_trend_p(successes, totals, scores, alternative)
            assert result.p_value == pytest.approx(expected, abs=1e-9), (successes, totals, scores, alternative)
            checked += 1


@pytest.mark.parametrize("alternative", ["increasing", "decreasing", "two-sided"])
def test_rescaled_scores_give_the_same_p_value(alternative):
    # Scores 0, 1, 2, 4 rescaled and shifted: the same test, so the same exact p, the brute-force
    # enumeration's. Non-integer scores used to fall back to the normal approximation.
    successes, totals = [1, 2, 4, 5], [6, 6, 6, 6]
    reference = _brute_force_trend_p(successes, totals, [0, 1, 2, 4], alternative)
    for scores in ([0, 1, 2, 4], [0, 0.5, 1, 2], [10, 20, 30, 50], [-0.3, -0.2, -0.1, 0.1],
                   [0, math.sqrt(2), 2 * math.sqrt(2), 4 * math.sqrt(2)], [1e-3, 2e-3, 3e-3, 5e-3]):
        result = stats.cochran_armitage(successes, totals, scores, alternative)
        assert result.exact and result.p_value == pytest.approx(reference, abs=1e-12), scores


def test_trend_statistic_matches_the_textbook_formula():
    # z = (T - X/N * sum(n s)) / sqrt(p (1 - p) * sum(n (s - mean s)^2)), here by hand.
    successes, totals, scores = [2, 5, 9], [20, 20, 20], [0, 1, 2]
    p = 16 / 60
    t = 5 + 18
    expected_t = p * 60
    variance = p * (1 - p) * 20 * (1 + 0 + 1)
    result = stats.cochran_armitage(successes, totals, scores, "two-sided")
    assert result.z == pytest.approx((t - expected_t) / math.sqrt(variance))


def test_trend_edge_cases():
    # No variation at all: no evidence of a trend.
    assert stats.cochran_armitage([0, 0, 0], [24, 24, 24]) == stats.TrendResult(None, 1.0, False)
    assert stats.cochran_armitage([24, 24], [24, 24]).p_value == 1.0
    # One group with observations: no test.
    assert stats.cochran_armitage([3, 0], [10, 0]).p_value is None
    # Too large to enumerate: the normal approximation, still decisive.
    big = stats.cochran_armitage([100 + 10 * i for i in range(10)], [300] * 10)
    assert not big.exact and big.p_value < 1e-6
    # Scores on no common lattice: the normal approximation.
    assert not stats.cochran_armitage([1, 5, 9], [20, 20, 20], [0, 1, math.sqrt(2)]).exact
    with pytest.raises(ValueError):
        stats.cochran_armitage([1, 2], [3, 4], alternative="up")


def test_fisher_exact_one_sided_is_the_hypergeometric_tail():
    # 0 of 24 at level 1 against 7 of 24 at level 4: P(X >= 7) for X ~ Hypergeom(48, 7, 24).
    expected = sum(math.comb(7, k) * math.comb(41, 24 - k) for k in range(7, 8)) / math.comb(48, 24)
    assert stats.fisher_exact(0, 24, 7, 24, "greater") == pytest.approx(expected)
    assert stats.fisher_exact(7, 24, 0, 24, "greater") == pytest.approx(1.0)
    assert stats.fisher_exact(0, 24, 0, 24, "greater") == 1.0
    assert stats.fisher_exact(0, 0, 3, 10) is None


LEVEL_SIZES = [32, 32, 32, 64]      # the suite's defaults: 32 requests, and 64 at level 64


def _simulate(rates, seed):
    rng = random.Random(seed)
    return [sum(rng.random() < rate for _ in range(n)) for rate, n in zip(rates, LEVEL_SIZES)]


@pytest.mark.parametrize("rate", [0.03, 0.2])
def test_trend_test_holds_its_level_when_divergence_does_not_grow(rate):
    """p > 0.05 in at least 95% of seeds when divergence is the same at every level. The exact test
    never exceeds its level; with few divergent outputs, the usual case, it stays well below it."""
    seeds = 600
    quiet = sum(stats.cochran_armitage(_simulate([rate] * 4, seed), LEVEL_SIZES).p_value > 0.05
                for seed in range(seeds))
    assert quiet >= 0.95 * seeds, f"{seeds - quiet} of {seeds} seeds gave p <= 0.05"


def test_trend_test_finds_divergence_that_grows_with_concurrency():
    seeds = 200
    found = sum(stats.cochran_armitage(_simulate([0.0, 0.1, 0.25, 0.45], seed), LEVEL_SIZES).p_value < 0.01
                for seed in range(seeds))
    assert found >= 0.95 * seeds
