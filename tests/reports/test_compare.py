"""prober/reports/compare.py against independent references (scipy, statsmodels), the coverage of its
interval for a percentile ratio by simulation, and what it refuses to compare."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import fisher_exact
from statsmodels.stats.proportion import confint_proportions_2indep

from prober.alerting.baseline import what_changed
from prober.alerting.drift import min_effect_for
from prober.core import stats
from prober.core.config import DriftConfig
from prober.reports.compare import Side, compare
from prober.reports.compare_render import render_html, render_json, render_markdown
from prober.store import Store
from tests.support.history import add_run, share

pytestmark = pytest.mark.unit


def _min_effect(kind: str, metric: str) -> float:
    return min_effect_for(kind, metric, DriftConfig())


def _percentile_row(name: str, values, **labels) -> dict:
    estimate = stats.percentile_interval(list(values), 50)
    return {"name": name, "value": estimate.value, "ci_low": estimate.low, "ci_high": estimate.high,
            "n": estimate.n, "unit": "ms", "labels": labels, "flags": estimate.flags}


@pytest.fixture
def store(tmp_path):
    with Store.open(f"sqlite:///{tmp_path}/p.db") as opened:
        yield opened


def _sides(store, a_runs, b_runs, target=None):
    return Side("A", [store.get_run(r) for r in a_runs], target), Side("B", [store.get_run(r) for r in b_runs], target)


def test_a_share_is_fisher_exact_with_newcombe_interval(store):
    add_run(store, "a", 0, [share("error_rate", 3, 60, concurrency=4)])
    add_run(store, "b", 1, [share("error_rate", 15, 60, concurrency=4)])
    (c,) = compare(store, *_sides(store, ["a"], ["b"]), what_changed, _min_effect).compared
    assert c.kind == "share" and c.test == "Fisher exact" and not c.relative
    assert c.p_value == pytest.approx(fisher_exact([[3, 57], [15, 45]]).pvalue)
    low, high = confint_proportions_2indep(15, 60, 3, 60, method="newcomb", compare="diff")
    assert (c.difference, c.low, c.high) == pytest.approx((0.2, low, high))
    assert c.significant     # q = p with one test, 0.2 over the 0.05 minimum effect


def test_percentile_ratio_interval_covers_the_true_ratio_at_least_95_percent():
    """Lognormal TTFTs, B 30% slower in truth: the MOVER interval of the log p50s, built from each
    side's distribution-free interval, covers the true ratio in at least 95% of 400 simulated pairs
    (measured: 97-98%; the order-statistic intervals are themselves conservative); and with no
    difference its p falls under 0.05 at most about 5% of the time."""
    rng = np.random.default_rng(7)
    covered = false_alarms = 0
    for _ in range(400):
        a = _percentile_row("ttft_p50_ms", rng.lognormal(math.log(100), 0.3, 60))
        b = _percentile_row("ttft_p50_ms", rng.lognormal(math.log(130), 0.3, 60))
        same = _percentile_row("ttft_p50_ms", rng.lognormal(math.log(100), 0.3, 60))
        logged = [(math.log(r["value"]), math.log(r["ci_low"]), math.log(r["ci_high"])) for r in (a, b, same)]
        _, low, high = stats.mover_difference(logged[0], logged[1])
        covered += low <= math.log(1.3) <= high
        difference, low, high = stats.mover_difference(logged[0], logged[2])
        false_alarms += stats.interval_p(difference, low, high) < 0.05
    assert covered / 400 >= 0.95
    assert false_alarms / 400 <= 0.06


def test_interval_p_agrees_with_the_interval():
    assert stats.interval_p(0.3, 0.1, 0.5) < 0.05
    assert stats.interval_p(0.3, -0.01, 0.6) > 0.05
    assert stats.interval_p(0.0, -0.1, 0.1) == 1.0


def test_a_latency_estimate_is_a_relative_change_sorted_before_weaker_evidence(store):
    rng = np.random.default_rng(1)
    base = rng.lognormal(math.log(100), 0.1, 80)
    add_run(store, "a", 0, [_percentile_row("ttft_p50_ms", base, concurrency=1), share("goodput", 50, 60)])
    add_run(store, "b", 1, [_percentile_row("ttft_p50_ms", base * 1.5, concurrency=1), share("goodput", 49, 60)])
    result = compare(store, *_sides(store, ["a"], ["b"]), what_changed, _min_effect)
    first, second = result.compared
    assert (first.name, second.name) == ("ttft_p50_ms", "goodput")
    assert first.relative and first.difference == pytest.approx(0.5)
    assert first.low < 0.5 < first.high and first.significant
    assert not second.significant


def test_other_parameters_make_a_metric_not_comparable(store):
    add_run(store, "a", 0, [share("error_rate", 3, 60)], params={"max_tokens": 64})
    add_run(store, "b", 1, [share("error_rate", 3, 60)], params={"max_tokens": 128})
    result = compare(store, *_sides(store, ["a"], ["b"]), what_changed, _min_effect)
    assert result.compared == []
    (apart,) = result.not_comparable
    assert "max_tokens 64 -> 128" in apart.reason


def test_windows_are_compared_run_by_run_with_the_drift_tests_t(store):
    """Five runs a side; side B's TTFT 40% higher: the run is the unit (t over runs), and one noisy
    run does not make a difference of its own."""
    for night, value in enumerate([100, 104, 98, 101, 97]):
        add_run(store, f"a{night}", night, [{"name": "ttft_p50_ms", "value": value, "ci_low": value - 3,
                                            "ci_high": value + 3, "n": 60, "unit": "ms", "labels": {}}])
    for night, value in enumerate([140, 138, 143, 139, 141]):
        add_run(store, f"b{night}", 10 + night, [{"name": "ttft_p50_ms", "value": value, "ci_low": value - 3,
                                                 "ci_high": value + 3, "n": 60, "unit": "ms", "labels": {}}])
    a = Side("A", list(reversed([store.get_run(f"a{i}") for i in range(5)])), "emu")
    b = Side("B", list(reversed([store.get_run(f"b{i}") for i in range(5)])), "emu")
    (c,) = compare(store, a, b, what_changed, _min_effect).compared
    assert c.test == "t over runs, log" and (c.runs_a, c.runs_b) == (5, 5)
    assert c.low < c.difference < c.high and c.significant
    assert c.difference == pytest.approx(math.exp(np.mean(np.log([140, 138, 143, 139, 141]))
                                                  - np.mean(np.log([100, 104, 98, 101, 97]))) - 1)


def test_renderings_escape_what_the_store_holds(store):
    hostile = "emu\x1b]0;pwned\x07<script>|*"
    add_run(store, "a", 0, [share("error_rate", 3, 60, case=hostile)], target=hostile)
    add_run(store, "b", 1, [share("error_rate", 9, 60, case=hostile)], target=hostile)
    result = compare(store, *_sides(store, ["a"], ["b"]), what_changed, _min_effect)
    markdown, html = render_markdown(result), render_html(result)
    for text in (markdown, html):
        assert "\x1b" not in text and "<script>" not in text
    assert "&lt;script&gt;" in html and "\\x1b" in markdown
    assert '"case": "emu\\u001b]0;pwned\\u0007<script>|*"' in render_json(result)   # JSON escapes; consumers decide


def test_html_overlays_both_sides_latency_curves(store):
    def level(value, concurrency):
        return {"name": "ttft_p50_ms", "value": value, "ci_low": value * 0.9, "ci_high": value * 1.1, "n": 60,
                "unit": "ms", "labels": {"concurrency": concurrency}}

    add_run(store, "a", 0, [level(100, 1), level(180, 8), share("error_rate", 0, 60, concurrency=1)], target="fp16")
    add_run(store, "b", 1, [level(150, 1), level(300, 8), share("error_rate", 0, 60, concurrency=1)], target="int4")
    result = compare(store, *_sides(store, ["a"], ["b"]), what_changed, _min_effect)
    (plot,) = result.plots          # latency's TTFT chart; its ITL chart has no rows here
    assert plot.title == "TTFT percentiles against concurrency: fp16 vs int4"
    assert [(s.label, [(p.x, p.y) for p in s.points]) for s in plot.series] == [
        ("A: ttft_p50_ms", [(1.0, 100), (8.0, 180)]), ("B: ttft_p50_ms", [(1.0, 150), (8.0, 300)])]
    page = render_html(result)
    assert page.count("<svg") == 1 and "B: ttft_p50_ms" in page


def test_a_timing_measured_while_the_client_was_saturated_is_shown_and_not_tested(store):
    rng = np.random.default_rng(3)
    for run, scale, saturated in (("a", 1.0, 0.0), ("b", 1.6, 1.0)):
        add_run(store, run, int(run == "b"), [
            _percentile_row("ttft_p50_ms", rng.lognormal(math.log(100 * scale), 0.1, 60), concurrency=8),
            _percentile_row("ttft_p50_ms", rng.lognormal(math.log(100 * scale), 0.1, 60), concurrency=1),
            {"name": "client_saturated", "value": saturated, "n": 50, "unit": "bool", "labels": {"concurrency": 8}},
            {"name": "client_saturated", "value": 0.0, "n": 50, "unit": "bool", "labels": {"concurrency": 1}}])
    result = compare(store, *_sides(store, ["a"], ["b"]), what_changed, _min_effect)
    by_level = {c.labels["concurrency"]: c for c in result.compared if c.name == "ttft_p50_ms"}
    assert by_level[8].p_value is None and by_level[8].note == "client saturated" and not by_level[8].significant
    assert by_level[1].significant
