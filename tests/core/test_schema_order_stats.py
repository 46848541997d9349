"""The paired-comparison statistics of the schema-order suite: exact McNemar and mid-p, the paired
difference's interval, items for 80% power, and O'Brien-Fleming-type alpha-spending bounds."""

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import binom, norm
from statsmodels.stats.contingency_tables import mcnemar as statsmodels_mcnemar

from prober.core import stats

pytestmark = pytest.mark.unit

# (a_only, b_only): all concordant, tiny, one-sided, balanced, moderate and large tables.
TABLES = [(0, 0), (0, 1), (1, 0), (1, 1), (0, 3), (1, 4), (5, 0), (0, 5), (2, 2), (3, 7), (10, 3),
          (12, 12), (25, 40), (100, 130), (0, 60)]


def _hand_mcnemar(a_only: int, b_only: int) -> tuple[Fraction, Fraction]:
    """Exact p and mid-p from binomial coefficients, in exact fractions."""
    n = a_only + b_only
    if n == 0:
        return Fraction(1), Fraction(1)
    k = min(a_only, b_only)
    tail = sum(Fraction(math.comb(n, i), 2 ** n) for i in range(k + 1))
    observed = Fraction(math.comb(n, k), 2 ** n)
    return min(Fraction(1), 2 * tail), min(Fraction(1), 2 * tail - observed)


@pytest.mark.parametrize("a_only, b_only", TABLES)
def test_exact_mcnemar_equals_statsmodels_and_a_hand_calculation(a_only, b_only):
    concordant_right, concordant_wrong = 17, 9      # concordant cells do not enter the test
    table = [[concordant_right, a_only], [b_only, concordant_wrong]]
    result = stats.mcnemar(a_only, b_only)
    assert result.p_value == pytest.approx(statsmodels_mcnemar(table, exact=True).pvalue, rel=1e-12, abs=1e-15)
    p_hand, mid_hand = _hand_mcnemar(a_only, b_only)
    assert result.p_value == pytest.approx(float(p_hand), rel=1e-12, abs=1e-15)
    assert result.mid_p == pytest.approx(float(mid_hand), rel=1e-9, abs=1e-15)
    assert result.mid_p <= result.p_value


def test_mcnemar_keeps_p_and_mid_p_positive_where_the_binomial_cdf_underflows():
    # 1108 against 18: the tail is about 1e-300; computed directly it underflowed to p = 0 and a
    # negative mid-p. The exact fractions are the reference.
    result = stats.mcnemar(1108, 18)
    p_hand, mid_hand = _hand_mcnemar(1108, 18)
    assert result.p_value == pytest.approx(float(p_hand), rel=1e-9) and result.p_value > 0
    assert result.mid_p == pytest.approx(float(mid_hand), rel=1e-9) and result.mid_p > 0


def test_mcnemar_mid_p_stays_within_0_and_1_on_large_tables():
    # The audit's scan: 12,000 random tables with 1000-1299 discordant pairs (5,155 gave a negative
    # mid-p before); every one in [0, 1], and a sample of them equal to the exact fractions.
    rng = np.random.default_rng(12)
    discordant = rng.integers(1000, 1300, size=12_000)
    a_only = rng.integers(0, discordant + 1)
    for i, (a, n) in enumerate(zip(a_only.tolist(), discordant.tolist())):
        result = stats.mcnemar(a, n - a)
        assert 0.0 <= result.mid_p <= result.p_value <= 1.0, (a, n - a)
        if i % 60 == 0:
            p_hand, mid_hand = _hand_mcnemar(a, n - a)
            assert result.p_value == pytest.approx(float(p_hand), rel=1e-9, abs=1e-300)
            assert result.mid_p == pytest.approx(float(mid_hand), rel=1e-9, abs=1e-300)


def test_worked_small_tables():
    # 0 against 3 discordant: P(X <= 0) = 1/8, doubled; the mid-p takes away P(X = 0) once.
    result = stats.mcnemar(0, 3)
    assert (result.p_value, result.mid_p) == (pytest.approx(0.25, rel=1e-12), pytest.approx(0.125, rel=1e-12))
    assert stats.mcnemar(4, 1).p_value == pytest.approx(12 / 32)
    assert stats.mcnemar(4, 1).mid_p == pytest.approx(12 / 32 - 5 / 32)
    assert stats.mcnemar(0, 0) == stats.McNemarResult(1.0, 1.0)         # all concordant: no evidence
    assert stats.mcnemar(6, 6).mid_p == pytest.approx(1.0)
    with pytest.raises(ValueError):
        stats.mcnemar(-1, 2)


def test_paired_difference_estimate_and_interval():
    assert stats.paired_difference(0, 0, 0) == (None, None, None)
    difference, low, high = stats.paired_difference(0, 0, 50)        # all concordant
    assert difference == 0 and low < 0 < high and high - low < 0.12 and low == pytest.approx(-high)
    difference, low, high = stats.paired_difference(30, 10, 200)
    assert difference == pytest.approx(0.1) and low < 0.1 < high and low > 0
    assert stats.paired_difference(0, 40, 40)[1:] == (pytest.approx(-1.0, abs=0.05), pytest.approx(-0.9, abs=0.05))
    with pytest.raises(ValueError):
        stats.paired_difference(30, 30, 50)


def test_paired_difference_interval_covers_the_truth_about_95_percent():
    rng = np.random.default_rng(7)
    n, p_a_only, p_b_only = 120, 0.12, 0.04
    tables = rng.multinomial(n, [p_a_only, p_b_only, 1 - p_a_only - p_b_only], size=3000)
    truth = p_a_only - p_b_only
    covered = sum(low <= truth <= high for low, high in
                  (stats.paired_difference(int(a), int(b), n)[1:] for a, b, _ in tables))
    assert 0.93 <= covered / len(tables) <= 0.975


def _exact_power(n: int, psi: float, share_a: float, alpha: float) -> float:
    """Power of the exact McNemar test with n pairs: discordant count D ~ Bin(n, psi), then
    a_only ~ Bin(D, share_a); rejection where the exact p is at most alpha."""
    power = 0.0
    for d in range(n + 1):
        weight = binom.pmf(d, n, psi)
        if weight < 1e-12:
            continue
        b = np.arange(d + 1)
        rejected = [stats.mcnemar(int(x), d - int(x)).p_value <= alpha for x in b]
        power += weight * float(np.sum(binom.pmf(b, d, share_a)[rejected]))
    return power


@pytest.mark.parametrize("a_only, b_only, n", [(14, 75, 300), (30, 15, 200), (8, 20, 100)])
def test_items_for_80_power_gives_about_80_percent_exact_power(a_only, b_only, n):
    needed = stats.mcnemar_items_for_power(a_only, b_only, n)
    psi = (a_only + b_only) / n
    power = _exact_power(needed, psi, a_only / (a_only + b_only), 0.05)
    # Connor's approximation is for the normal test; the exact test is a little conservative.
    assert 0.72 <= power <= 0.9, (needed, power)
    assert _exact_power(needed * 2, psi, a_only / (a_only + b_only), 0.05) > power


def test_items_for_power_edge_cases_and_monotonicity():
    assert stats.mcnemar_items_for_power(5, 5, 100) is None        # no observed difference
    assert stats.mcnemar_items_for_power(0, 0, 100) is None
    assert stats.mcnemar_items_for_power(1, 0, 0) is None
    assert stats.mcnemar_items_for_power(20, 5, 100) < stats.mcnemar_items_for_power(15, 10, 100)
    assert stats.mcnemar_items_for_power(15, 10, 100, power=0.9) > stats.mcnemar_items_for_power(15, 10, 100)


def test_one_look_is_the_fixed_sample_test():
    (bound,) = stats.obrien_fleming_bounds([1.0], 0.05)
    assert bound == pytest.approx(norm.isf(0.025), abs=1e-9)
    assert stats.nominal_alphas([bound]) == [pytest.approx(0.05)]


def test_obrien_fleming_bounds_spend_alpha_as_planned():
    fractions = [0.2, 0.4, 0.6, 0.8, 1.0]
    bounds = stats.obrien_fleming_bounds(fractions, 0.05)
    assert bounds == sorted(bounds, reverse=True)
    assert bounds[0] == pytest.approx(norm.isf(0.025) / math.sqrt(0.2), rel=1e-9)   # all of alpha(t_1) at look 1
    assert 1.96 < bounds[-1] < 2.1           # the final look stays close to the fixed-sample test
    # Monte Carlo under the null: the score is Brownian motion observed at the looks; the chance of
    # crossing first at look k must be the alpha spent between looks k-1 and k.
    rng = np.random.default_rng(3)
    times = np.array(fractions)
    scores = np.cumsum(rng.standard_normal((400_000, 5)) * np.sqrt(np.diff(np.r_[0, times])), axis=1)
    crossed = np.abs(scores) / np.sqrt(times) >= np.array(bounds)
    first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), -1)
    spent = 2 * norm.sf(norm.isf(0.025) / np.sqrt(times))
    for look, planned in enumerate(np.diff(np.r_[0, spent])):
        assert np.mean(first == look) == pytest.approx(planned, abs=max(4 * math.sqrt(planned / 400_000), 2e-5))
    assert np.mean(first >= 0) == pytest.approx(0.05, abs=0.002)


def test_unequal_looks_and_bad_fractions():
    bounds = stats.obrien_fleming_bounds([0.5, 1.0], 0.01)
    assert bounds[0] > bounds[1] > norm.isf(0.005)
    for bad in ([], [0.5, 0.5], [0.0, 1.0], [0.6, 0.3], [0.5, 1.2]):
        with pytest.raises(ValueError):
            stats.obrien_fleming_bounds(bad)
