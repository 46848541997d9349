"""Arrival schedules: their inter-arrival times follow the stated distribution (scipy's tests as
the independent reference), and a seed fixes the schedule."""

import numpy as np
import pytest
from scipy import stats as sps

from prober.probes.arrivals import inter_arrivals, schedule

pytestmark = pytest.mark.unit

RATE = 40.0


def _gaps(offsets):
    return np.diff(np.asarray(offsets))


def _rejections(kind, reference, seeds=200, n=500, burstiness=1.0, alpha=0.05):
    """The share of `seeds` schedules whose gaps a Kolmogorov-Smirnov test rejects against `reference`."""
    rejected = 0
    for seed in range(seeds):
        gaps = _gaps(schedule(kind, RATE, seed=seed, count=n + 1, burstiness=burstiness))
        rejected += sps.kstest(gaps, reference.cdf).pvalue < alpha
    return rejected / seeds


def test_poisson_gaps_are_exponential_with_the_rate_as_mean():
    # Measured: 6% of 200 seeded schedules rejected at alpha 0.05 (gamma: 7% at shape 0.5, 3.5% at
    # 2; the test's own false-alarm rate is 5%); against a mean 15% off, 68% are rejected, and a
    # gamma schedule against the exponential, 100%.
    assert _rejections("poisson", sps.expon(scale=1 / RATE)) <= 0.10
    assert _rejections("poisson", sps.expon(scale=1 / (RATE * 1.15))) >= 0.5   # the test has power


@pytest.mark.parametrize("burstiness", [0.5, 2.0])
def test_gamma_gaps_follow_their_shape_and_keep_the_mean_rate(burstiness):
    reference = sps.gamma(a=burstiness, scale=1 / (RATE * burstiness))
    assert _rejections("gamma", reference, burstiness=burstiness) <= 0.10
    # A gamma schedule is not Poisson: the same test against the exponential rejects it.
    assert _rejections("gamma", sps.expon(scale=1 / RATE), burstiness=burstiness) >= 0.9
    gaps = inter_arrivals("gamma", RATE, 20_000, seed=1, burstiness=burstiness)
    assert sps.ttest_1samp(gaps, 1 / RATE).pvalue > 0.001


def test_constant_schedule_is_evenly_spaced_from_zero():
    offsets = schedule("constant", 8.0, seed=0, count=5)
    assert offsets == pytest.approx([0.0, 0.125, 0.25, 0.375, 0.5])


@pytest.mark.parametrize("kind", ["poisson", "gamma"])
def test_same_seed_same_schedule_another_seed_another(kind):
    first = schedule(kind, RATE, seed=7, count=300, burstiness=0.5)
    assert schedule(kind, RATE, seed=7, count=300, burstiness=0.5) == first
    assert schedule(kind, RATE, seed=8, count=300, burstiness=0.5) != first
    assert schedule(kind, RATE, seed="7:poisson:40", count=300, burstiness=0.5) != first


def test_duration_keeps_arrivals_within_it_and_replays_the_same_prefix():
    short = schedule("poisson", RATE, seed=3, duration_s=5.0)
    long = schedule("poisson", RATE, seed=3, duration_s=50.0)
    assert short and short[-1] < 5.0 and long[-1] < 50.0
    assert long[:len(short)] == short
    assert long[len(short)] >= 5.0
    # About rate x duration arrivals: a Poisson count of mean 2000 is within 4 sd of it.
    assert abs(len(long) - RATE * 50) < 4 * np.sqrt(RATE * 50)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        schedule("poisson", 0.0, seed=0, count=3)
    with pytest.raises(ValueError):
        schedule("poisson", 1.0, seed=0, count=3, duration_s=1.0)
