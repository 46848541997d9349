"""Percentiles with intervals: distribution-free order-statistic intervals against scipy's
quantile test, their coverage by simulation, the request-level bootstrap for pooled ITL gaps, and
the flag on a percentile whose sample cannot bound its interval (p99 of 32 requests)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import lognorm, quantile_test

from prober.core import stats
from prober.probes.latency import LatencyParams, LatencyProbe

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("n", [1, 5, 6, 12, 32, 40, 100, 367, 368, 400])
@pytest.mark.parametrize("q", [1, 10, 50, 90, 99])
def test_order_statistic_interval_equals_scipy_quantile_test(n, q):
    # scipy's two-sided confidence interval of quantile_test is the same distribution-free
    # construction; a side it cannot bound is NaN there and None here.
    data = np.random.default_rng(n * 100 + q).lognormal(size=n)
    estimate = stats.percentile_interval(data, q)
    reference = quantile_test(data, q=1.0, p=q / 100).confidence_interval(0.95)
    for ours, theirs in ((estimate.low, reference.low), (estimate.high, reference.high)):
        assert (ours is None) == math.isnan(theirs)
        if ours is not None:
            assert ours == theirs
    assert estimate.value == pytest.approx(float(np.percentile(data, q)))
    assert (estimate.flags is None) == (estimate.low is not None and estimate.high is not None)


def test_p99_needs_368_observations_and_32_leave_it_flagged():
    assert stats.min_n_for_bounded_percentile(99) == 368
    assert stats.min_n_for_bounded_percentile(90) == 36
    assert stats.min_n_for_bounded_percentile(50) == 6
    small = stats.percentile_interval(np.arange(32.0), 99)
    assert small.high is None and small.low is not None and small.flags == [stats.INTERVAL_UNBOUNDED]


@pytest.mark.parametrize("n, q", [(40, 90), (64, 50), (400, 99)])
def test_order_statistic_intervals_cover_the_true_percentile_at_least_95_percent(n, q):
    # 2,000 lognormal samples each; measured 97.1% (n=40, p90), 96.1% (n=64, p50), 95.8% (n=400,
    # p99) with 4,000. The bound leaves three standard errors below 95%.
    rng = np.random.default_rng(n + q)
    truth = lognorm.ppf(q / 100, 1)
    covered = 0
    for _ in range(2000):
        estimate = stats.percentile_interval(rng.lognormal(size=n), q)
        covered += estimate.low <= truth <= estimate.high
    assert covered / 2000 >= 0.935


def _correlated_requests(rng, n: int, gaps: int = 8) -> list[np.ndarray]:
    """Inter-token gaps of `n` requests: each request has its own speed (its batch, its queue)."""
    return [scale * rng.lognormal(0, 0.5, size=gaps) for scale in np.exp(rng.normal(0, 0.5, size=n))]


@pytest.mark.parametrize("q", [50, 90])
def test_request_bootstrap_covers_the_pooled_itl_percentile_where_pooled_gaps_do_not(q):
    # 48 requests of 8 correlated gaps, 200 simulated runs: here the bootstrap over requests covers
    # 93.0% (p50) and 92.5% (p90), an order-statistic interval over the pooled gaps (gaps of one
    # request counted as independent) 75% and 76%. With 1,000 runs: 94.9% and 93.1%; p99 of 400
    # requests of 63 gaps, 300 runs: 93.0%.
    rng = np.random.default_rng(q)
    truth = float(np.percentile(np.concatenate(_correlated_requests(rng, 100_000)), q))
    covered = naive = 0
    for _ in range(200):
        requests = _correlated_requests(rng, 48)
        estimate = stats.clustered_percentile_interval(requests, q)
        assert estimate.n == 48 and estimate.flags is None
        covered += estimate.low <= truth <= estimate.high
        pooled = stats.percentile_interval(np.concatenate(requests), q)
        naive += pooled.low <= truth <= pooled.high
    assert covered / 200 >= 0.90, (covered, naive)
    assert naive / 200 < 0.85, (covered, naive)


def test_request_bootstrap_is_flagged_with_too_few_requests_and_repeatable():
    rng = np.random.default_rng(3)
    requests = _correlated_requests(rng, 32, gaps=63)              # 2,016 gaps, but 32 requests
    p99 = stats.clustered_percentile_interval(requests, 99)
    assert p99.n == 32 and p99.flags == [stats.INTERVAL_UNBOUNDED] and p99.low is None
    assert p99.value == pytest.approx(float(np.percentile(np.concatenate(requests), 99)))
    assert stats.clustered_percentile_interval(requests, 50) == stats.clustered_percentile_interval(requests, 50)
    assert stats.clustered_percentile_interval([], 50) == stats.PercentileEstimate(None, None, None, 0)


def _latency_rows(n: int, level: int = 1) -> list[dict]:
    rng = np.random.default_rng(n)
    rows = []
    for ttft in rng.lognormal(4, 0.3, size=n):
        offsets = list(ttft + np.cumsum(rng.lognormal(1, 0.2, size=8)))
        rows.append({"probe": "latency", "labels": {"concurrency": level, "phase": "measure"}, "final": True,
                     "ttft_ms": float(ttft), "headers_ms": float(ttft) / 2, "end_ms": offsets[-1] + 1,
                     "chunk_offsets_ms": offsets, "usage": {"output_tokens": 8}, "started_at": None})
    return rows


@pytest.mark.parametrize("n", [32, 400])
def test_latency_stores_every_percentile_with_its_interval_and_flags_an_unbounded_p99(n):
    # 32 requests a level leave p90 (needs 36) and p99 (needs 368) flagged; 400 bound them all.
    metrics = {m.name: m for m in LatencyProbe().summarize(_latency_rows(n), LatencyParams(levels=[1]),
                                                           run_id="r", target="t")}
    for name, q in (("ttft_p50_ms", 50), ("ttft_p90_ms", 90), ("ttft_p99_ms", 99), ("headers_p50_ms", 50),
                    ("itl_p50_ms", 50), ("itl_p99_ms", 99), ("e2e_p50_ms", 50), ("e2e_p99_ms", 99),
                    ("output_tps_per_request_p50", 50)):
        metric = metrics[name]
        flagged = n < stats.min_n_for_bounded_percentile(q)
        assert metric.n == n and metric.value is not None, name
        if not name.startswith("itl"):
            assert metric.ci_low is not None and metric.ci_low <= metric.value, name
        assert metric.flags == ([stats.INTERVAL_UNBOUNDED] if flagged else None), name
        assert (metric.ci_high is None) == flagged, name
        if not flagged:
            assert metric.value <= metric.ci_high, name


def test_the_latency_suite_defaults_bound_p99():
    from prober.suites.loader import load_suite

    assert LatencyParams().requests_per_level >= stats.min_n_for_bounded_percentile(99)
    (entry,) = load_suite("latency", []).entries
    assert entry.params.requests_per_level >= stats.min_n_for_bounded_percentile(99)


def test_show_and_history_mark_a_flagged_percentile_and_say_why(tmp_path):
    from prober.store import Store
    from tests.support.cli import prober
    from tests.support.history import add_run

    config = tmp_path / "prober.toml"
    config.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "p.db"}"\n')
    with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        add_run(store, "run1", 0, [
            {"name": "ttft_p50_ms", "value": 420.0, "ci_low": 400.0, "ci_high": 450.0, "n": 32, "unit": "ms",
             "labels": {"concurrency": 1}},
            {"name": "ttft_p99_ms", "value": 5000.0, "ci_low": 700.0, "n": 32, "unit": "ms",
             "labels": {"concurrency": 1}, "flags": [stats.INTERVAL_UNBOUNDED]}])
    shown = prober("show", "run1", "--config", str(config), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any("ttft_p99_ms" in line and "5,000 !" in line and "700 .. unbounded" in line for line in lines)
    assert any("ttft_p50_ms" in line and "420 " in line and "400 .. 450" in line and "!" not in line
               for line in lines)
    assert "! interval_unbounded: too few requests" in " ".join(shown.stdout.split())
    assert "coverage at least 95%" in " ".join(shown.stdout.split())
    history = prober("history", "--metric", "ttft_p99_ms", "--config", str(config), cwd=tmp_path)
    assert history.returncode == 0 and "5,000 !" in history.stdout and "700 .. unbounded" in history.stdout
