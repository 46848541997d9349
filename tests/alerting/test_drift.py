"""Drift with the night as the unit: the routines against independent references (statsmodels,
scipy), their false-alarm rate under night-to-night variation that pooled tests read as drift,
detection of injected shifts, the policy (families pooled over cells, regressions page and
improvements notify, the page budget split over the night's tests), and the store path (one- and
two-night windows, too few runs)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm

from prober.alerting.alerts import drift_observations, evaluate_run
from prober.alerting.baseline import BaselineReads
from prober.alerting.drift import (
    TREND_RECENT_P,
    DriftOutcome,
    baseline_resets,
    decide,
    drift_for_run,
    limits_from_alerts,
    night_test,
    target_tests,
)
from prober.alerting.run_values import run_values
from prober.core import stats
from prober.core.config import DriftConfig, ProberConfig
from prober.core.metric_rows import is_proportion
from prober.store import Store
from tests.support.history import add_run, share

pytestmark = pytest.mark.unit

NIGHTS = 400


# --- against independent references ----------------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_night_prediction_p_is_alpha_at_the_statsmodels_prediction_interval(alpha):
    rng = np.random.default_rng(1)
    for k in (3, 7, 14):
        baseline = list(rng.normal(5, 0.2, k))
        fitted = sm.OLS(np.array(baseline), np.ones((k, 1))).fit()
        low, high = fitted.get_prediction(np.ones((1, 1))).conf_int(obs=True, alpha=alpha)[0]
        for edge in (low, high):
            p, _ = stats.night_prediction_p([edge], baseline)
            assert p == pytest.approx(alpha, rel=1e-9)
        # One-sided: half the two-sided level at the edge on its side, the rest of it at the other.
        assert stats.night_prediction_p([high], baseline, alternative="greater")[0] == pytest.approx(alpha / 2)
        assert stats.night_prediction_p([high], baseline, alternative="less")[0] == pytest.approx(1 - alpha / 2)
        assert stats.night_prediction_p([low], baseline, alternative="less")[0] == pytest.approx(alpha / 2)
    assert stats.night_prediction_p([1.0], [1.0, 2.0]) == (None, None)        # 1 degree of freedom: no test


@pytest.mark.parametrize("x, n, mean, factor", [(2, 192, 0.003, 1.0), (3, 54, 0.01, 3.0), (0, 7, 0.95, 1.5),
                                                (7, 7, 0.95, 1.5), (4, 7, 0.95, 2.0), (10, 30, 0.3, 5.0),
                                                (1, 3, 0.2, 2.99), (150, 300, 0.5, 400.0)])
def test_beta_binomial_tail_is_scipys_distribution_with_the_stated_mean_and_variance(x, n, mean, factor):
    from scipy.stats import betabinom, binom

    # The law behind the tails, recovered by enumerating P(X <= k) for every k.
    cdf = np.array([stats.beta_binomial_tail(k, n, mean, factor, "less") for k in range(n + 1)])
    pmf = np.diff(cdf, prepend=0.0)
    k = np.arange(n + 1)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-9)
    assert (pmf * k).sum() == pytest.approx(n * mean, rel=1e-6)
    variance = (pmf * k ** 2).sum() - (n * mean) ** 2
    assert variance == pytest.approx(min(factor, n - 1e-6) * n * mean * (1 - mean), rel=1e-5)
    # ...which is scipy's beta-binomial (binomial at factor 1), tail by tail.
    if factor == 1.0:
        law = binom(n, mean)
    else:
        # the beta-binomial whose variance factor (s + n) / (s + 1) is `factor`, s found numerically
        from scipy.optimize import brentq
        s = brentq(lambda s: (s + n) / (s + 1) - min(factor, n - 1e-6), 1e-12, 1e12)
        law = betabinom(n, mean * s, (1 - mean) * s)
    assert stats.beta_binomial_tail(x, n, mean, factor, "greater") == pytest.approx(law.sf(x - 1), rel=1e-6)
    assert stats.beta_binomial_tail(x, n, mean, factor, "less") == pytest.approx(law.cdf(x), rel=1e-6)
    assert stats.beta_binomial_tail(x, n, mean, factor) == pytest.approx(
        min(1.0, 2 * min(law.sf(x - 1), law.cdf(x))), rel=1e-6)


def _night_share(rng: np.random.Generator, level: float, sd: float) -> float:
    strength = level * (1 - level) / sd ** 2 - 1
    return float(rng.beta(level * strength, (1 - level) * strength))


def _share_alarms(level: float, n: int, sd: float, k: int, seed: int, pooled: bool) -> float:
    """Share of quiet nights on which one share metric is significant at 0.05 (no margin)."""
    rng = np.random.default_rng(seed)
    alarms = 0
    for _ in range(NIGHTS):
        xs = [int(rng.binomial(n, _night_share(rng, level, sd))) for _ in range(k + 1)]
        if pooled:
            p = stats.fisher_exact(sum(xs[1:]), k * n, xs[0], n)
        else:
            p = stats.share_night_p(xs[0], n, xs[1:], [n] * k)
        alarms += p <= 0.05
    return alarms / NIGHTS


@pytest.mark.parametrize("level, n, sd", [(0.9, 64, 0.05), (0.3, 32, 0.08)])
def test_night_to_night_wobble_that_a_pooled_test_reads_as_drift_stays_at_the_nominal_level(level, n, sd):
    pooled = _share_alarms(level, n, sd, 7, seed=3, pooled=True)
    night = _share_alarms(level, n, sd, 7, seed=3, pooled=False)
    print(f"share {level} n={n} sd={sd}: pooled Fisher {pooled:.3f}, night-level {night:.3f}")
    assert pooled > 0.12                    # the finding: 15-21% of quiet nights
    assert night <= 0.06


def test_latency_wobble_between_nights_stays_at_the_nominal_level():
    rng = np.random.default_rng(4)
    alarms = 0
    for _ in range(NIGHTS):
        medians = [float(np.median(np.exp(np.log(100) + rng.normal(0, 0.2) + rng.normal(0, 0.3, 32))))
                   for _ in range(8)]
        p, _ = stats.night_prediction_p([math.log(medians[0])], [math.log(m) for m in medians[1:]])
        alarms += p <= 0.05
    assert alarms / NIGHTS <= 0.065


def test_a_real_shift_of_a_share_is_found():
    rng = np.random.default_rng(5)
    found = 0
    for _ in range(200):
        base = [int(rng.binomial(64, _night_share(rng, 0.9, 0.02))) for _ in range(28)]
        found += stats.share_night_p(int(rng.binomial(64, 0.6)), 64, base, [64] * 28, "less") <= 0.001
    assert found / 200 >= 0.9          # measured 0.935: the dispersion's uncertainty costs a little power


@pytest.mark.parametrize("level, n, cells, sd, nights", [
    (0.97, 32, 6, 0.08, 1),     # goodput: 6 concurrency levels of 32 requests pooled
    (0.3, 3, 18, 0.08, 1),      # a penalty setting: 18 grid cells of 3 requests pooled
    (0.03, 3, 18, 0.05, 2),     # ...the same near 0, two nights together
    (0.9, 7, 1, 0.05, 1),       # a cache case on 7 requests
    (0.95, 23, 1, 0.02, 2)])
def test_shares_near_0_or_1_on_few_requests_keep_their_one_sided_level(level, n, cells, sd, nights):
    """Where the quasi-binomial normal approximation paged (goodput 0.97, 3-request penalty cells):
    the beta-binomial predictive stays at its level at the strict alphas the page budget gives.
    Each cell has its own night share (a beta with sd `sd`); the family pools the cells."""
    rng = np.random.default_rng(8)
    trials, alpha, k = 10_000, 0.001, 28
    strength = level * (1 - level) / sd ** 2 - 1
    shares = rng.beta(level * strength, (1 - level) * strength, (trials, k + nights, cells))
    counts = rng.binomial(n, shares).sum(axis=2)
    alternative = "less" if level > 0.5 else "greater"
    alarms = sum(stats.share_night_p(sum(row[:nights]), n * cells * nights, row[nights:], [n * cells] * k,
                                     alternative, nights) <= alpha for row in counts.tolist())
    # 10,000 trials: the binomial sd of a rate of 0.001 is 0.0003
    assert alarms / trials <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / trials), alarms / trials


def test_two_nights_together_are_judged_with_a_night_effect_each():
    """The mean of two nights has half the night-to-night variance: a sustained move that one night
    cannot show clearly stands out on the second."""
    base = [254, 248, 271, 264, 270, 258, 262, 263, 268, 272, 267, 256, 277, 280, 268, 242, 275, 256, 259, 265,
            274, 254, 255, 254, 273, 272, 263, 261]             # accuracy on 300 items, sd 0.03 between nights
    one = stats.share_night_p(228, 300, base, [300] * 28, "less")
    two = stats.share_night_p(456, 600, base, [300] * 28, "less", nights=2)
    assert two < one / 10
    # pooled as if one night of 600 trials, the night effect would count once for both
    assert stats.share_night_p(456, 600, base, [300] * 28, "less") > two * 10


# --- the drift module -----------------------------------------------------------------------------

def test_differences_are_not_mistaken_for_proportions_and_flagged_rows_are_not_judged():
    assert is_proportion({"probe": "caching", **share("hit_rate", 3, 8)})
    assert not is_proportion({"probe": "caching", **share("hit_rate", 3, 8), "flags": ["too_few"]})
    assert not is_proportion({"probe": "schema_order", "name": "paired_difference", "value": 0.1, "ci_low": 0.0,
                              "ci_high": 0.2, "n": 60, "unit": "ratio"})
    assert not is_proportion({"probe": "latency", "name": "ttft_p50_ms", "value": 0.5, "n": 8, "unit": "ms"})
    rows = [{"target": "t", "probe": "latency", "name": "ttft_p50_ms", "value": 80.0, "n": 32, "labels": {},
             "flags": ["client_limited"]},
            {"target": "t", "probe": "latency", "name": "ttft_p99_ms", "value": 300.0, "n": 32, "labels": {}}]
    assert run_values(rows) == {}


def test_a_tiny_shift_on_a_large_sample_is_significant_but_stays_quiet():
    rng = np.random.default_rng(3)
    base = [run_values([{"target": "t", "probe": "latency", **share("error_rate", int(rng.binomial(200_000, 0.10)),
                                                                      200_000)}]) for _ in range(7)]
    now = run_values([{"target": "t", "probe": "latency", **share("error_rate", 20_800, 200_000)}])
    config = DriftConfig(min_baseline_runs=3)
    tests, _ = target_tests("t", now, base, config)
    decided = decide(tests, config)
    assert decided[0].p_value < decided[0].alpha and not decided[0].detected   # 10.4% against 10%: below 0.05
    lowered = decide(tests, DriftConfig(min_baseline_runs=3, min_effect={"error_rate": 0.001}))
    assert lowered[0].detected and lowered[0].regressed and not lowered[0].pages   # tonight alone: a notice


def test_paired_difference_moves_only_beyond_its_sampling_noise():
    quiet = [run_values(_paired_rows(a, b)) for a, b in ((14, 10), (12, 11), (15, 9), (13, 12), (11, 10))]
    (identity, (value, labels)), = run_values(_paired_rows(13, 11)).items()
    test = night_test("paired", "t", "schema_order", "paired_difference", labels, [value],
                      [run[identity][0] for run in quiet])
    assert test.p_value > 0.5
    (_, (moved, _)), = run_values(_paired_rows(40, 2)).items()
    test = night_test("paired", "t", "schema_order", "paired_difference", labels, [moved],
                      [run[identity][0] for run in quiet])
    assert test.p_value < 0.01 and test.effect == pytest.approx(38 / 300 - 0.01, abs=0.01)


def _paired_rows(a_only: int, b_only: int, items: int = 300) -> list[dict]:
    pair = {"a": "x", "b": "y"}
    difference, low, high = stats.paired_difference(a_only, b_only, items)
    return [{"target": "t", "probe": "schema_order", "name": "discordant_a_only", "value": a_only, "n": items,
             "labels": pair},
            {"target": "t", "probe": "schema_order", "name": "discordant_b_only", "value": b_only, "n": items,
             "labels": pair},
            {"target": "t", "probe": "schema_order", "name": "paired_difference", "value": difference, "n": items,
             "ci_low": low, "ci_high": high, "unit": "ratio", "labels": pair}]


def _penalty_night(corrupted: dict[tuple[str, float], int]) -> list[dict]:
    """Corruption counts of the penalty grid's cells (3 requests each); `corrupted` sets some."""
    return [{"target": "t", "probe": "penalty",
             **share("corruption_rate", corrupted.get((mode, temperature), 0), 3, mode=mode, temperature=temperature,
                     n_records=10, penalty="frequency_penalty", penalty_value=0.3)}
            for mode in ("unconstrained", "json_object", "json_schema") for temperature in (0.0, 0.2)]


def test_a_penalty_setting_pools_its_grid_cells_into_one_family_and_names_the_cell_that_moved():
    config = DriftConfig()
    quiet = [run_values(_penalty_night({})) for _ in range(config.baseline_runs + 1)]
    (_identity, (value, labels)), = run_values(_penalty_night({})).items()
    assert labels == {"penalty": "frequency_penalty", "penalty_value": 0.3} and value.n == 18
    # The move lasts two nights (tonight and the previous run): drift pages a regression that persists.
    moved = run_values(_penalty_night({("json_schema", 0.2): 3, ("json_object", 0.0): 1}))
    tests, short = target_tests("t", moved, [moved, *quiet[1:]], config)
    decided = decide(tests, config)
    # tonight, two nights, and the trend over the last baseline_runs runs
    assert short == 0 and {(t.nights, t.trend) for t in decided} == {(1, False), (2, False),
                                                                    (config.baseline_runs, True)}
    tonight = next(t for t in decided if t.nights == 2)
    assert tonight.pages and tonight.current == pytest.approx(4 / 18) and tonight.cells == 6
    assert tonight.summary.endswith("most moved: mode=json_schema, n_records=10, penalty=frequency_penalty, "
                                    "penalty_value=0.3, temperature=0.2 1 (+1)")


def _latency_night(ttft_ms: float, modal: int = 30) -> list[dict]:
    return [{"target": "t", "probe": "latency", "name": "ttft_p50_ms", "value": ttft_ms * (1 + level / 8),
             "n": 32, "unit": "ms", "labels": {"concurrency": level}} for level in (1, 4, 16)] + [
        {"target": "t", "probe": "divergence", **share("modal_share", modal, 32, concurrency=16)}]


def test_an_improvement_or_a_move_without_a_bad_direction_is_a_notice_and_never_pages():
    config = DriftConfig()
    rng = np.random.default_rng(6)
    quiet = [run_values(_latency_night(100 * math.exp(rng.normal(0, 0.05)), int(rng.binomial(32, 0.9))))
             for _ in range(config.baseline_runs + 1)]
    tests, _ = target_tests("t", run_values(_latency_night(40, modal=5)), quiet, config)
    outcome = DriftOutcome(tests=decide(tests, config))
    moved = {(t.metric, t.nights) for t in outcome.tests if t.detected}
    assert moved == {("ttft_ms", 1), ("ttft_ms", 2), ("modal_share", 1), ("modal_share", 2)}
    assert not any(t.pages for t in outcome.tests)
    assert len(outcome.notices) == 4 and all(line.startswith("notice: drift: t ") for line in outcome.notices)
    observations = drift_observations(outcome.tests, {"suite": "nightly"})
    # modal share: no alert at all; TTFT's is the latency group's
    assert [(o.metric, o.broken) for o in observations] == [("latency", False)]
    # The same move upwards is a regression: it pages.
    tests, _ = target_tests("t", run_values(_latency_night(250)), quiet, config)
    assert [(o.metric, o.broken) for o in drift_observations(decide(tests, config), {"suite": "nightly"})] == [
        ("latency", True)]


def test_the_page_budget_is_split_over_windows_probes_and_families_and_adds_up_to_it():
    config = DriftConfig(false_pages_per_90_nights=0.9)
    quiet = [{**run_values(_latency_night(100 * (1 + 0.01 * (i % 3)))), **run_values(_penalty_night({}))}
             for i in range(config.baseline_runs + 1)]
    tonight = {**run_values(_latency_night(100)), **run_values(_penalty_night({}))}
    decided = decide(target_tests("t", tonight, quiet, config)[0] + target_tests("u", tonight, quiet, config)[0][:1],
                     config)
    alpha = {(t.target, t.probe, t.metric, t.nights, t.trend): t.alpha for t in decided}
    # "t": two probes with one regression family each (modal share has no bad direction). The
    # two-night window spends 0.8 of the night's 0.01, tonight alone (notices) is decided at the
    # same level; the trend window 0.2, all of it latency's (a penalty grid at 0 has no slope).
    assert (alpha[("t", "latency", "ttft_ms", 2, False)] == alpha[("t", "latency", "ttft_ms", 1, False)]
            == pytest.approx(0.01 * 0.8 / 2))
    assert alpha[("t", "penalty", "corruption_rate", 2, False)] == pytest.approx(0.01 * 0.8 / 2)
    assert alpha[("t", "latency", "ttft_ms", config.baseline_runs, True)] == pytest.approx(0.01 * 0.2)
    assert not any(t.trend for t in decided if t.probe == "penalty")
    # The tests that page spend exactly the target's budget; "u" has only one family, which gets it all.
    assert sum(t.alpha for t in decided if t.target == "t" and t.direction and t.nights > 1) == pytest.approx(0.01)
    assert [t.alpha for t in decided if t.target == "u"] == pytest.approx([0.01])


# --- against the store ----------------------------------------------------------------------------

def _stored_night(store: Store, night: int, ttft_ms: float, errors: int, status: str = "complete") -> dict:
    return add_run(store, f"n{night}", night, [
        *({"name": name, "value": value, "labels": {"concurrency": 4}, "n": 24, "unit": "ms"}
          for name, value in (("ttft_p50_ms", ttft_ms), ("itl_p50_ms", 8.0 * (1 + 0.02 * (night % 3))),
                              ("e2e_p50_ms", ttft_ms + 500))),
        share("error_rate", errors, 24, concurrency=4)], status=status)


@pytest.mark.parametrize("shifted", [False, True])
def test_drift_on_stored_runs_uses_the_previous_complete_runs_of_the_suite_and_target(tmp_path, shifted):
    config = ProberConfig.model_validate({"drift": {"baseline_runs": 8, "min_baseline_runs": 7}})
    quiet_ttft = [100, 104, 97, 101, 99, 103, 98, 102, 100]
    with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        for night in range(7):
            first = _stored_night(store, night, quiet_ttft[night], night % 2)
            evaluation = evaluate_run(store, config, first["id"])
            assert evaluation.checked == 0                                   # too little history: no test...
            assert evaluation.notes == [f"drift: emu latency.latency: {night} comparable baseline run(s), the "
                                        "night-level tests need 7: not tested"]           # ...and it says so
        _stored_night(store, 7, 900, 20, status="failed")             # not complete: not in the baseline
        add_run(store, "other-suite", 8, [share("error_rate", 24, 24, concurrency=4)], suite="divergence",
                target="emu")
        # A shift lasts two nights (9 and 10): drift pages a regression that persists.
        _stored_night(store, 9, 250 if shifted else quiet_ttft[7], 12 if shifted else 1)
        tonight = _stored_night(store, 10, 250 if shifted else quiet_ttft[8], 12 if shifted else 0)
        tests = drift_for_run(store, tonight, config.drift).tests
        one_night = {(t.kind, t.metric): t for t in tests if t.nights == 1}
        assert set(one_night) == {("proportion", "error_rate"), ("latency", "ttft_ms"), ("latency", "itl_ms"),
                                  ("latency", "e2e_ms")}
        assert {t.baseline_runs for t in one_night.values()} == {8}
        assert {t.baseline_runs for t in tests if t.nights == 2} == {7}
        evaluation = evaluate_run(store, config, tonight["id"])
    fired = {row["metric"] for row in evaluation.fired_now}
    if shifted:
        # TTFT and e2e moved together: one page, the latency group's, naming both (ITL did not move)
        assert fired == {"error_rate", "latency"}
        latency = next(row for row in evaluation.fired_now if row["metric"] == "latency")
        assert latency["name"] == "drift_latency" and latency["detail"]["families"] == ["e2e_ms", "ttft_ms"]
        assert set(latency["detail"]["members"]) == {"e2e_ms", "itl_ms", "ttft_ms"}
        assert "ttft_ms" in latency["summary"] and "e2e_ms" in latency["summary"]
        assert "itl_ms" not in latency["summary"]
        two_nights = {t.metric: t for t in tests if t.nights == 2}
        assert two_nights["ttft_ms"].effect == pytest.approx(1.5, abs=0.1) and two_nights["ttft_ms"].pages
    else:
        assert fired == set() and evaluation.firing == []


def _mixed_night(rng: np.random.Generator, shift: float) -> list[dict]:
    """A night of every kind of row a probe stores: the ones drift judges (shares, latency, a paired
    comparison, a penalty grid) and the ones it never reads (a difference of shares with unit
    "ratio", throughput, counts, a flagged percentile), with night-to-night wobble."""
    wobble = float(np.exp(rng.normal(0, 0.04)))
    rows = [{"probe": "latency", "name": "ttft_p50_ms", "value": 100 * wobble * shift * (1 + level / 8), "n": 32,
             "unit": "ms", "labels": {"concurrency": level}} for level in (1, 4)]
    rows += [{"probe": "latency", "name": "ttft_p99_ms", "value": 400 * wobble, "n": 32, "unit": "ms",
              "labels": {"concurrency": 4}, "flags": ["interval_unbounded"]},
             {"probe": "latency", "name": "tokens_per_s", "value": 50 / wobble, "n": 32, "unit": "tokens/s",
              "labels": {"concurrency": 4}},
             {"probe": "latency", "name": "requests", "value": 64, "unit": "requests", "labels": {}},
             {"probe": "latency", "name": "ttft_warm_vs_cold", "value": 0.8 * wobble, "n": 32, "unit": "ratio",
              "labels": {"case": "naïve"}},
             {"probe": "latency", **share("error_rate", int(rng.binomial(64, 0.05 * shift)), 64, concurrency=4)},
             {"probe": "latency", **share("goodput", int(rng.binomial(64, 0.9)), 64, concurrency=4)}]
    rows += [{key: value for key, value in row.items() if key != "target"}
             for row in _paired_rows(int(rng.poisson(12 * shift)), int(rng.poisson(10)))]
    rows += [{key: value for key, value in row.items() if key != "target"}
             for row in _penalty_night({("json_schema", 0.2): int(rng.binomial(3, 0.1 * shift))})]
    return rows


@pytest.mark.parametrize("shift", [1.0, 2.5])
def test_the_store_path_reads_only_judged_rows_and_decides_as_every_row_of_the_baseline_would(tmp_path, shift):
    """drift_for_run reads the baseline's judged rows only (by unit and name, some columns), a few
    candidate runs at a time: its tests equal those made from every stored row of the same runs."""
    config = DriftConfig(baseline_runs=8, min_baseline_runs=5)
    rng = np.random.default_rng(7)
    with Store.open(f"sqlite:///{tmp_path / 'mixed.db'}") as store:
        for night in range(14):     # the shift lasts two nights (13 and 14): it persists
            add_run(store, f"n{night:02d}", night, _mixed_night(rng, shift if night == 13 else 1.0), suite="nightly")
        tonight = add_run(store, "n14", 14, _mixed_night(rng, shift), suite="nightly")
        found = drift_for_run(store, tonight, config)
        earlier = [f"n{night:02d}" for night in range(13, 13 - config.baseline_runs - 1, -1)]
        tests = []
        for entry in sorted({row["entry"] for row in store.metrics("n14")}):
            every_row = [run_values(store.metrics(run_id, target="emu", entry=entry)) for run_id in earlier]
            tests += target_tests("emu", run_values(store.metrics("n14", target="emu", entry=entry)), every_row,
                                  config)[0]
    expected = decide(tests, config)
    assert {t.kind for t in expected} == {"proportion", "latency", "paired"}
    assert found.tests == expected
    assert any(t.pages for t in expected) == (shift > 1)


class _CountingStore:
    """The real store, counting how often it is asked for baseline candidates."""

    def __init__(self, store: Store) -> None:
        self.store, self.candidate_reads = store, 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    def completed_runs(self, *args: object, **kwargs: object) -> list[dict]:
        self.candidate_reads += 1
        return self.store.completed_runs(*args, **kwargs)


@pytest.mark.parametrize("changed", [False, True])
def test_the_resets_after_the_drift_tests_select_the_same_baselines_without_reading_the_runs_again(tmp_path, changed):
    """prober run's evaluation shares one BaselineReads between drift_for_run and baseline_resets:
    the same tests and resets as separate selections, and no candidate run read twice."""
    config = DriftConfig(baseline_runs=4, min_baseline_runs=3)
    with Store.open(f"sqlite:///{tmp_path / 'reads.db'}") as real:
        for night in range(10):
            add_run(real, f"n{night}", night, [share("error_rate", night % 3, 24)], params={"requests": 24})
        tonight = add_run(real, "n10", 10, [share("error_rate", 1, 24)], params={"requests": 48 if changed else 24})
        expected_tests, expected_resets = drift_for_run(real, tonight, config), baseline_resets(real, tonight, config)
        store, reads = _CountingStore(real), BaselineReads()
        assert drift_for_run(store, tonight, config, reads) == expected_tests
        read_by_the_tests = store.candidate_reads
        assert baseline_resets(store, tonight, config, reads) == expected_resets
    assert read_by_the_tests > 0 and store.candidate_reads == read_by_the_tests
    assert expected_resets == (["baseline reset: emu latency.latency: requests 24 -> 48"] if changed else [])
    assert bool(expected_tests.tests) != changed


def test_an_open_latency_group_alert_holds_every_family_of_it_out_of_its_baseline():
    # One alert for the group (ttft, itl, e2e of one probe and labels): while it fires, each family's
    # nights since the drift began stay out of that family's baseline; its "new normal" re-baselines each.
    members = {metric: f"drift|t|latency|{metric}|{{}}" for metric in ("e2e_ms", "itl_ms", "ttft_ms")}
    key = "drift|t|latency|latency|{}|site=fra"
    firing = {"key": key, "kind": "drift", "state": "firing",
              "detail": {"drift_since": 40, "families": ["ttft_ms"], "members": members}}
    limits = limits_from_alerts([firing], "fra")
    assert limits.drifting == dict.fromkeys(members.values(), 40)
    assert limits.allowed(members["itl_ms"], "itl_ms", [41, 40, 39]) == [False, False, True]
    closed = {**firing, "state": "resolved", "detail": {**firing["detail"], "new_normal_since": 40}}
    limits = limits_from_alerts([closed], "fra")
    assert limits.drifting == {} and all(limits.accepted_since(k, m) == 40 for m, k in members.items())


def _grouped_latency_night(wobble: float, itl_wobble: float, e2e_wobble: float) -> list[dict]:
    return [{"target": "t", "probe": "latency", "name": name, "value": value * w, "n": 32, "unit": "ms",
             "labels": {"concurrency": 4}}
            for name, value, w in (("ttft_p50_ms", 100, wobble), ("itl_p50_ms", 8, itl_wobble),
                                   ("e2e_p50_ms", 600, e2e_wobble))] + [
        {"target": "t", "probe": "latency", **share("error_rate", 0, 32, concurrency=4)}]


@pytest.mark.parametrize("together", [True, False])
def test_a_page_group_spends_one_familys_share_of_the_budget(together):
    # ttft, itl and e2e are one page (the latency group): the group gets one family's share of the
    # latency probe's budget (error rate has the other), divided by the effective number of tests
    # its families make: about 1 when their nights move together, about 3 when they do not.
    config = DriftConfig()
    rng = np.random.default_rng(8)
    quiet = []
    for _ in range(config.baseline_runs + 1):
        w = math.exp(rng.normal(0, 0.1))
        others = (w, w) if together else (math.exp(rng.normal(0, 0.1)), math.exp(rng.normal(0, 0.1)))
        quiet.append(run_values(_grouped_latency_night(w, *others)))
    tests, _ = target_tests("t", run_values(_grouped_latency_night(1, 1, 1)), quiet, config)
    decided = [t for t in decide(tests, config) if t.nights == 2 and not t.trend]
    share_of_one = config.false_pages_per_90_nights / 90 * 0.8 / 2       # two families in the probe
    latency = [t for t in decided if t.kind == "latency"]
    assert len(latency) == 3 and len({t.group_tests for t in latency}) == 1
    assert latency[0].group_tests == (pytest.approx(1, abs=0.05) if together else pytest.approx(3, abs=0.5))
    assert sum(t.alpha * t.group_tests for t in latency) / 3 == pytest.approx(share_of_one)
    assert [t.alpha for t in decided if t.metric == "error_rate"] == pytest.approx([share_of_one])


def test_the_effective_number_of_tests_of_a_group():
    from prober.alerting.drift import group_effective_tests

    rng = np.random.default_rng(3)
    night = rng.normal(size=56)
    assert group_effective_tests([night, 2 * night + 1, night - 3]) == pytest.approx(1)
    assert group_effective_tests([rng.normal(size=56) for _ in range(3)]) == pytest.approx(3, abs=0.3)
    assert group_effective_tests([night[:2], night[:2]]) == 2            # too few nights: Bonferroni
    assert group_effective_tests([night]) == 1


@pytest.mark.parametrize("recent", [0.15, -0.12])
def test_a_trend_pages_only_when_the_latest_nights_are_out_of_range(recent):
    # A slope fitted on 56 nights: a rise whose latest two nights are off the baseline pages; one
    # whose latest nights are back within the range that resolves an alert is a notice, so it
    # cannot page, resolve the next night and page again.
    config = DriftConfig()
    rng = np.random.default_rng(9)
    nights = 2 * config.baseline_runs
    level = [0.006 * i for i in range(nights)]                              # +0.6% a night, oldest first
    level[-2:] = [level[-3] + recent] * 2                                  # the last two nights
    series = [run_values(_latency_night(100 * math.exp(v + rng.normal(0, 0.02)))) for v in level]
    tests, _ = target_tests("t", series[-1], series[-2::-1][:config.baseline_runs + 1], config)
    decided = decide(tests, config)
    trend = next(t for t in decided if t.trend and t.metric == "ttft_ms")
    two = next(t for t in decided if t.nights == 2 and t.metric == "ttft_ms")
    assert trend.regressed and trend.each_night_p == two.p_value
    assert trend.pages == (two.p_value <= TREND_RECENT_P) == (recent > 0), (trend, two)


def test_a_family_alert_from_before_page_groups_is_taken_over_by_its_group(tmp_path):
    # A TTFT drift alert stored under the family's own key (before page groups) still firing: the
    # latency group's alert takes it over without a new page, and the old row resolves once.
    config = ProberConfig.model_validate({"drift": {"baseline_runs": 8, "min_baseline_runs": 7}})
    quiet_ttft = [100, 104, 97, 101, 99, 103, 98, 102]
    with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        for night in range(8):
            evaluate_run(store, config, _stored_night(store, night, quiet_ttft[night], 0)["id"])
        first = _stored_night(store, 9, 250, 0)
        site = f"|site={first['site']}" if first.get("site") else ""
        old_key = "drift|emu|latency|ttft_ms|{}" + site
        legacy = {"key": old_key, "kind": "drift", "name": "drift_ttft_ms", "severity": "warning", "target": "emu",
                  "suite": first["suite"], "probe": "latency", "metric": "ttft_ms", "labels": {}, "state": "firing",
                  "breaks": 1, "value": 250.0, "summary": "drift: emu latency ttft_ms", "fired_at": first["started_at"],
                  "resolved_at": None, "updated_at": first["started_at"], "last_run_id": first["id"],
                  "detail": {"drift_since": first["started_at"].isoformat(), "in_range": False,
                             "site": first.get("site") or ""}}
        store.save_alert_changes([legacy], [], [])
        tonight = _stored_night(store, 10, 250, 0)
        evaluation = evaluate_run(store, config, tonight["id"])
        rows = {row["key"]: row for row in store.alerts()}
        events = store.alert_events(old_key)
    group = "drift|emu|latency|latency|{}" + site
    assert evaluation.fired_now == [] and rows[group]["state"] == "firing", evaluation.fired_now
    assert rows[group]["detail"]["drift_since"] == first["started_at"].isoformat()
    assert rows[old_key]["state"] == "resolved" and [e["status"] for e in events] == ["resolved"]
    assert group in rows[old_key]["summary"]
