"""Drift with the night as the unit: the routines against independent references (statsmodels,
scipy), their false-alarm rate under night-to-night variation that pooled tests read as drift,
detection of injected shifts, and the store path (one- and two-night windows, too few runs)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm

from prober import stats
from prober.config import DriftConfig, ProberConfig
from reports.alerts import evaluate_run
from reports.drift import decide, drift_for_run, is_proportion, night_test, run_values, target_tests
from store import Store
from tests.support.history import add_run, share

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
    assert stats.night_prediction_p([1.0], [1.0, 2.0]) == (None, None)        # 1 degree of freedom: no test


def test_binomial_dispersion_is_the_statsmodels_quasi_binomial_scale():
    rng = np.random.default_rng(2)
    for _ in range(20):
        n = rng.integers(5, 80, 7)
        x = rng.binomial(n, rng.beta(6, 4, 7))
        fitted = sm.GLM(x / n, np.ones((7, 1)), family=sm.families.Binomial(), var_weights=n).fit(scale="X2")
        assert stats.binomial_dispersion(list(x), list(n)) == pytest.approx(fitted.scale, rel=1e-9)
    assert stats.binomial_dispersion([0, 0, 0], [8, 8, 8]) == 1.0


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
            p = stats.share_change_p(xs[0], n, xs[1:], [n] * k)
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
        base = [int(rng.binomial(64, _night_share(rng, 0.9, 0.02))) for _ in range(7)]
        found += stats.share_change_p(int(rng.binomial(64, 0.6)), 64, base, [64] * 7) <= 0.01
    assert found / 200 >= 0.95


# --- the drift module -----------------------------------------------------------------------------

def test_differences_are_not_mistaken_for_proportions_and_flagged_rows_are_not_judged():
    assert is_proportion(share("hit_rate", 3, 8))
    assert not is_proportion({**share("hit_rate", 3, 8), "flags": ["too_few"]})
    assert not is_proportion({"name": "paired_difference", "value": 0.1, "ci_low": 0.0, "ci_high": 0.2, "n": 60,
                              "unit": "ratio"})
    assert not is_proportion({"name": "ttft_p50_ms", "value": 0.5, "n": 8, "unit": "ms"})
    rows = [{"target": "t", "probe": "latency", "name": "ttft_p50_ms", "value": 80.0, "n": 32, "labels": {},
             "flags": ["client_limited"]},
            {"target": "t", "probe": "latency", "name": "ttft_p99_ms", "value": 300.0, "n": 32, "labels": {}}]
    assert run_values(rows) == {}


def test_a_tiny_shift_on_a_large_sample_is_significant_but_stays_quiet():
    rng = np.random.default_rng(3)
    base = [run_values([{"target": "t", "probe": "latency", **share("error_rate", int(rng.binomial(200_000, 0.10)),
                                                                      200_000)}]) for _ in range(7)]
    now = run_values([{"target": "t", "probe": "latency", **share("error_rate", 20_800, 200_000)}])
    tests, _ = target_tests("t", now, base, DriftConfig())
    decided = decide(tests, DriftConfig())
    assert decided[0].q_value < 0.01 and not decided[0].detected          # 10.4% against 10%: below 0.05
    lowered = decide(tests, DriftConfig(min_effect={"error_rate": 0.001}))
    assert lowered[0].detected


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


# --- against the store ----------------------------------------------------------------------------

def _stored_night(store: Store, night: int, ttft_ms: float, errors: int, status: str = "complete") -> dict:
    return add_run(store, f"n{night}", night, [
        *({"name": name, "value": value, "labels": {"concurrency": 4}, "n": 24, "unit": "ms"}
          for name, value in (("ttft_p50_ms", ttft_ms), ("itl_p50_ms", 8.0 * (1 + 0.02 * (night % 3))),
                              ("e2e_p50_ms", ttft_ms + 500))),
        share("error_rate", errors, 24, concurrency=4)], status=status)


@pytest.mark.parametrize("shifted", [False, True])
def test_drift_on_stored_runs_uses_the_previous_complete_runs_of_the_suite_and_target(tmp_path, shifted):
    config = ProberConfig.model_validate({"drift": {"baseline_runs": 4, "min_baseline_runs": 3}})
    quiet_ttft = [100, 104, 97, 101, 99]
    with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        for night in range(3):
            first = _stored_night(store, night, quiet_ttft[night], night % 2)
            evaluation = evaluate_run(store, config, first["id"])
            assert evaluation.checked == 0                                   # too little history: no test...
            assert evaluation.notes == [f"drift: emu: {night} comparable baseline run(s), the night-level tests "
                                        "need 3: not tested"]                # ...and it says so
        _stored_night(store, 3, 900, 20, status="failed")             # not complete: not in the baseline
        add_run(store, "other-suite", 4, [share("error_rate", 24, 24, concurrency=4)], suite="divergence",
                target="emu")
        _stored_night(store, 5, quiet_ttft[3], 1)
        tonight = _stored_night(store, 6, 250 if shifted else quiet_ttft[4], 12 if shifted else 0)
        tests = drift_for_run(store, tonight, config.drift).tests
        one_night = {(t.kind, t.metric): t for t in tests if t.nights == 1}
        assert set(one_night) == {("proportion", "error_rate"), ("latency", "ttft_ms"), ("latency", "itl_ms"),
                                  ("latency", "e2e_ms")}
        assert {t.baseline_runs for t in one_night.values()} == {4}
        assert {t.baseline_runs for t in tests if t.nights == 2} == {3}
        evaluation = evaluate_run(store, config, tonight["id"])
    fired = {row["metric"] for row in evaluation.fired_now}
    if shifted:
        assert fired == {"error_rate", "ttft_ms", "e2e_ms"}       # ITL did not move
        assert one_night[("latency", "ttft_ms")].effect == pytest.approx(1.5, abs=0.1)
    else:
        assert fired == set() and evaluation.firing == []
