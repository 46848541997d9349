import math

import pytest

from prober import stats


def test_percentile_interpolates_between_ranks():
    data = [10, 20, 30, 40]
    assert stats.percentile(data, 0) == 10
    assert stats.percentile(data, 100) == 40
    assert stats.percentile(data, 50) == 25
    assert stats.percentile(data, 90) == pytest.approx(37.0)


def test_percentile_ignores_missing_and_handles_empty():
    assert stats.percentile([], 50) is None
    assert stats.percentile([None, float("nan")], 50) is None
    assert stats.percentile([None, 5.0], 99) == 5.0


@pytest.mark.parametrize("k,n,low,high", [
    # Reference values computed by hand from the Wilson score formula (z = 1.96).
    (0, 10, 0.0, 0.2775),
    (5, 10, 0.2366, 0.7634),
    (10, 10, 0.7225, 1.0),
    (1, 100, 0.0018, 0.0545),
])
def test_wilson_interval_matches_reference(k, n, low, high):
    lo, hi = stats.wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=5e-4)
    assert hi == pytest.approx(high, abs=5e-4)


@pytest.mark.parametrize("n", [1, 3, 7, 10, 49, 1000])
def test_wilson_interval_ends_exactly_at_zero_and_one(n):
    assert stats.wilson_interval(0, n)[0] == 0.0
    assert stats.wilson_interval(n, n)[1] == 1.0


def test_wilson_interval_matches_statsmodels_formula_with_scipy_quantile():
    from scipy.stats import norm

    z = norm.ppf(0.975)
    k, n = 17, 40
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert stats.wilson_interval(k, n) == pytest.approx((centre - half, centre + half), abs=1e-9)


def test_proportion_of_nothing_is_unknown():
    assert stats.proportion(0, 0) == (None, None, None)
