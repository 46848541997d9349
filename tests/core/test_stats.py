import math

import pytest

from prober.core import stats

pytestmark = pytest.mark.unit


def test_percentile_interpolates_between_ranks():
    data = [10, 20, 30, 40]
    assert stats.percentile(data, 0) == 10
    assert stats.percentile(data, 100) == 40
    assert stats.percentile(data, 50) == 25
    assert stats.percentile(data, 90) == pytest.approx(37.0)


def test_percentile_equals_numpy_linear_and_rejects_q_outside_0_to_100():
    import numpy as np

    data = [3.5, 1.0, 8.25, 2.0, 40.0, 7.0, 7.0]
    for q in (0, 1, 10, 33.3, 50, 90, 99, 100):
        assert stats.percentile(data, q) == pytest.approx(float(np.percentile(data, q, method="linear")))
    for q in (-10, -1e-9, 100.5, float("nan")):
        with pytest.raises(ValueError, match="within"):
            stats.percentile(data, q)


def test_benjamini_hochberg_equals_statsmodels_and_keeps_nan_and_none():
    from statsmodels.stats.multitest import multipletests

    p_values = [0.01, float("nan"), 0.04, None, 0.03, 0.5, 0.002, float("nan")]
    adjusted = stats.benjamini_hochberg(p_values)
    tests = [i for i, p in enumerate(p_values) if p is not None and not math.isnan(p)]
    reference = multipletests([p_values[i] for i in tests], method="fdr_bh")[1]
    for i, q in zip(tests, reference):
        assert adjusted[i] == pytest.approx(q, rel=1e-12)
    assert math.isnan(adjusted[1]) and math.isnan(adjusted[7]) and adjusted[3] is None


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


@pytest.mark.parametrize("k, n", [(17, 40), (0, 1), (1, 1), (0, 12), (12, 12), (3, 7), (1, 1000), (999, 1000)])
def test_wilson_interval_is_statsmodels_proportion_confint(k, n):
    # statsmodels computes the interval on its own (its quantile from scipy, its own algebra):
    # an independent reference for both the formula and the 95% quantile.
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
    assert stats.wilson_interval(k, n) == pytest.approx((low, high), abs=1e-12)


def test_proportion_of_nothing_is_unknown():
    assert stats.proportion(0, 0) == (None, None, None)


def test_ar1_bias_and_degrees_of_freedom_under_sampling_noise():
    # A share's nights: an AR(1) night effect plus independent binomial noise. With all of the
    # variance the AR(1) series (signal 1) the plain AR(1) figures; with none of it, independent values.
    k, rho = 56, 0.8
    assert stats.ar1_degrees_of_freedom(rho, k, 1.0) == pytest.approx(k * (1 - rho ** 2) / (1 + rho ** 2) - 1)
    assert stats.ar1_degrees_of_freedom(rho, k, 0.0) == pytest.approx(k - 1)
    assert stats.ar1_variance_bias(rho, k, 0.0) == 1.0
    # The lag-j autocorrelation is signal rho^j: more dependent than the observed lag-1 autocorrelation
    # (signal rho) taken as an AR(1) coefficient says, so fewer degrees of freedom and more bias.
    observed = 0.86 * rho
    assert stats.ar1_degrees_of_freedom(rho, k, 0.86) < stats.ar1_degrees_of_freedom(observed, k) - 3
    assert stats.ar1_variance_bias(rho, k, 0.86) < stats.ar1_variance_bias(observed, k)
    # against a simulation: E[s^2] over many series of AR(1) plus noise
    import numpy as np

    rng = np.random.default_rng(4)
    signal, runs = 0.86, 4000
    effects = np.empty((runs, k))
    effects[:, 0] = rng.standard_normal(runs)
    for i in range(1, k):
        effects[:, i] = rho * effects[:, i - 1] + math.sqrt(1 - rho ** 2) * rng.standard_normal(runs)
    values = math.sqrt(signal) * effects + math.sqrt(1 - signal) * rng.standard_normal((runs, k))
    s2 = values.var(axis=1, ddof=1)
    assert s2.mean() == pytest.approx(stats.ar1_variance_bias(rho, k, signal), abs=0.01)
    # and the spread of s^2: a chi-square on the stated degrees of freedom has relative variance 2 / df
    df = stats.ar1_degrees_of_freedom(rho, k, signal)
    assert (s2.var() / s2.mean() ** 2) == pytest.approx(2 / df, rel=0.2)


def _ar1_series(rng, runs: int, k: int, rho: float, noise: float = 0.0):
    """`runs` series of k consecutive AR(1) night values (unit variance) plus independent noise,
    oldest first."""
    import numpy as np

    effects = np.empty((runs, k))
    effects[:, 0] = rng.standard_normal(runs)
    for i in range(1, k):
        effects[:, i] = rho * effects[:, i - 1] + math.sqrt(1 - rho ** 2) * rng.standard_normal(runs)
    return effects + noise * rng.standard_normal((runs, k))


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_the_one_step_prediction_error_has_the_stated_variance(rho):
    # The mean of two nights against the baseline mean plus a (rho^1, rho^2 averaged) of the
    # newest baseline night's departure: its variance is w' R w, narrower than the plain
    # difference of means (ar1_window_variance) once rho > 0; at rho 0 the same.
    import numpy as np

    k, current = 56, 2
    assert stats.ar1_prediction_variance(0.0, current, k) == pytest.approx(1 / current + 1 / k)
    values = _ar1_series(np.random.default_rng(11), 20000, k + current, rho)[:, ::-1]   # newest first
    window, baseline = values[:, :current].mean(axis=1), values[:, current:]
    a = (rho + rho ** 2) / 2
    error = window - (baseline.mean(axis=1) + a * (baseline[:, 0] - baseline.mean(axis=1)))
    assert error.var() == pytest.approx(stats.ar1_prediction_variance(rho, current, k), rel=0.04)
    assert stats.ar1_prediction_variance(rho, current, k) < 0.85 * stats.ar1_window_variance(rho, current, k)


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.8])
def test_the_serial_night_test_keeps_its_level_and_the_prediction_adds_power(rho):
    # Night values of an AR(1) series plus a little sampling noise (latency's p50 on ~400
    # requests): the two-night test through its one-step prediction keeps its one-sided level
    # (0.01 and 0.001 over 6,000 baselines of 56 nights, within the simulation's noise), and a
    # shift of 4 night sds is found at the page level far more often than the difference of means
    # finds it at rho 0.5 (0.77 of the same 1,000 before the prediction, 0.91 with it).
    import numpy as np

    k, runs = 56, 6000
    values = 0.1 * _ar1_series(np.random.default_rng(int(10 * rho) + 3), runs, k + 2, rho, 0.2)[:, ::-1]
    ps = np.array([stats.night_prediction_p(list(v[:2]), list(v[2:]), 1e-4, "greater", serial=True)[0]
                   for v in values])
    assert (ps <= 0.01).mean() == pytest.approx(0.01, abs=0.004)
    assert (ps <= 0.001).mean() <= 0.0025
    if rho == 0.5:
        shifted = values[:1000].copy()
        shifted[:, :2] += 0.4
        found = [stats.night_prediction_p(list(v[:2]), list(v[2:]), 1e-4, "greater", serial=True)[0] <= 5.9e-4
                 for v in shifted]
        assert np.mean(found) >= 0.88


def test_a_share_near_1_under_a_lasting_wander_keeps_its_two_night_level():
    # JSON validity near 0.98 on 300 items a night, its night effect a beta quantile of an AR(1)
    # series at rho 0.8 (bench/alarm_calibration.py's "low rho 0.8", where such shares paged most):
    # with the predictive's mean carried from the newest baseline night the two-night window keeps
    # its one-sided level 0.01 (0.0070 of these 3,000 baselines; 0.0177 against the pooled share).
    import numpy as np
    from scipy.special import betaincinv, ndtr

    rng = np.random.default_rng(7)
    level, sd, n, k, runs = 0.98, 0.02, 300, 56, 3000
    strength = level * (1 - level) / sd ** 2 - 1
    effects = _ar1_series(rng, runs, k + 2, 0.8)
    shares = betaincinv(level * strength, (1 - level) * strength, np.clip(ndtr(effects), 1e-12, 1 - 1e-12))
    counts = rng.binomial(n, shares)[:, ::-1]                   # newest first
    ps = np.array([stats.share_night_p(int(c[0] + c[1]), 2 * n, list(c[2:]), [n] * k, "less", nights=2, serial=True)
                   for c in counts])
    assert (ps <= 0.01).mean() <= 0.013, (ps <= 0.01).mean()
