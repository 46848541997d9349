"""Drift detection: quiet on noise-only history (<= 5% false-alarm nights per metric kind over 100
simulated nights), fires on an injected shift, ignores a tiny shift on a huge sample, and works
end to end on stored runs and samples."""

from __future__ import annotations

import numpy as np
import pytest

from prober import stats
from prober.config import DriftConfig, ProberConfig
from reports.alerts import evaluate_run
from reports.drift import (decide, drift_for_run, is_proportion, latency_test_for, paired_tests,
                           proportion_tests, request_values)
from store import Store
from tests.support.history import add_run, latency_samples, share

NIGHTS = 100
WINDOW = 7
KINDS = ("proportion", "latency", "paired")

# (name, labels, true share, n) as the probes report them on a quiet night.
PROPORTIONS = [("error_rate", {"concurrency": 16}, 0.02, 64), ("goodput", {"concurrency": 16}, 0.90, 64),
               ("divergence_rate", {"concurrency": 16, "prompt": "story"}, 0.30, 32),
               ("hit_rate", {"case": "repeat"}, 0.85, 8)]
LEVELS = (1, 16)
REQUESTS = 32


# Injected shifts: (error rate, TTFT factor, share of order b's right answers lost).
SHIFTS = {"none": (None, 1.0, 0.0), "moderate": (0.15, 1.5, 0.3), "clear": (0.25, 2.0, 0.5)}


def simulate_night(rng: np.random.Generator, shift: str = "none") -> dict:
    """One night's metric rows and per-request latencies, with night-to-night jitter on top of
    sampling noise (a shared host is never the same two nights running)."""
    error_rate, ttft_factor, lost = SHIFTS[shift]
    rows = []
    for name, labels, p, n in PROPORTIONS:
        if error_rate is not None and name == "error_rate":
            p = error_rate
        p_night = float(np.clip(p + rng.normal(0, 0.01), 0, 1))
        rows.append({"target": "emu", "probe": "latency", **share(name, int(rng.binomial(n, p_night)), n, **labels)})
    # Paired schema-order items: both orders right 80% of the time, agreeing on most items.
    items = 60
    right_a = rng.random(items) < 0.8
    right_b = np.where(rng.random(items) < 0.85, right_a, ~right_a)
    right_b = right_b & (rng.random(items) >= lost)
    a_only, b_only = int(np.sum(right_a & ~right_b)), int(np.sum(~right_a & right_b))
    difference, low, high = stats.paired_difference(a_only, b_only, items)
    pair = {"a": "declared", "b": "reversed"}
    rows.append({"target": "emu", "probe": "schema_order", "name": "mcnemar_p", "labels": pair,
                 "value": stats.mcnemar(a_only, b_only).p_value, "n": a_only + b_only, "unit": "p"})
    for name, count in (("discordant_a_only", a_only), ("discordant_b_only", b_only)):
        rows.append({"target": "emu", "probe": "schema_order", "name": name, "labels": pair, "value": count,
                     "n": items, "unit": "items"})
    rows.append({"target": "emu", "probe": "schema_order", "name": "paired_difference", "labels": pair,
                 "value": difference, "ci_low": low, "ci_high": high, "n": items, "unit": "ratio"})
    jitter = rng.normal(0, 0.05)
    latency = {}
    for level in LEVELS:
        scale = np.log(40 * level * ttft_factor) + jitter
        latency[("ttft_ms", level)] = list(rng.lognormal(scale, 0.3, REQUESTS))
        latency[("itl_ms", level)] = list(rng.lognormal(np.log(8) + jitter, 0.2, REQUESTS))
    return {"rows": rows, "latency": latency}


def night_tests(current: dict, baseline: list[dict], config: DriftConfig):
    tests = proportion_tests(current["rows"], [b["rows"] for b in baseline], config.min_baseline_runs)
    tests += paired_tests(current["rows"], [b["rows"] for b in baseline], config.min_baseline_runs)
    for quantity, level in current["latency"]:
        tests.append(latency_test_for("emu", "latency", quantity, {"concurrency": level},
                                      current["latency"][(quantity, level)],
                                      [b["latency"][(quantity, level)] for b in baseline], config))
    return decide(tests, config)


def alarm_rates(seed: int, shift: str) -> dict[str, float]:
    """Share of nights (out of NIGHTS) on which each kind raised at least one alarm."""
    rng = np.random.default_rng(seed)
    history = [simulate_night(rng) for _ in range(WINDOW)]
    config = DriftConfig()
    nights_with_alarm = dict.fromkeys(KINDS, 0)
    for _ in range(NIGHTS):
        tonight = simulate_night(rng, shift)
        decided = night_tests(tonight, history[-WINDOW:], config)
        assert {t.kind for t in decided} == set(KINDS)
        for kind in KINDS:
            nights_with_alarm[kind] += any(t.detected for t in decided if t.kind == kind)
        if shift == "none":
            history.append(tonight)       # a quiet night joins the baseline; a shifted one is tested alone
    return {kind: count / NIGHTS for kind, count in nights_with_alarm.items()}


def test_noise_only_history_raises_at_most_5_percent_false_alarms_per_kind():
    rates = alarm_rates(seed=7, shift="none")
    print(f"false-alarm nights over {NIGHTS}: {rates}")
    assert all(rate <= 0.05 for rate in rates.values()), rates


@pytest.mark.parametrize("shift, power", [("clear", 0.95), ("moderate", 0.7)])
def test_an_injected_shift_is_detected(shift, power):
    """clear: error rate 2% -> 25%, TTFT doubled, order b loses half its right answers; moderate:
    15%, x1.5, a third. Each shifted night is tested against a quiet baseline."""
    rates = alarm_rates(seed=11, shift=shift)
    print(f"detection over {NIGHTS} nights with a {shift} shift: {rates}")
    assert all(rate >= power for rate in rates.values()), rates


def test_a_tiny_shift_on_a_large_sample_is_significant_but_stays_quiet():
    rng = np.random.default_rng(3)
    base = [{"target": "emu", "probe": "latency", **share("error_rate", int(rng.binomial(200_000, 0.10)), 200_000)}
            for _ in range(WINDOW)]
    now = {"target": "emu", "probe": "latency", **share("error_rate", 20_800, 200_000)}   # 10.4% against 10%
    latency = latency_test_for("emu", "latency", "ttft_ms", {}, list(rng.lognormal(np.log(103), 0.3, 20_000)),
                               [list(rng.lognormal(np.log(100), 0.3, 20_000)) for _ in range(3)], DriftConfig())
    decided = decide(proportion_tests([now], [[row] for row in base], 3) + [latency], DriftConfig())
    assert decided[0].q_value < 0.01                     # a real shift of the share, and a tiny one
    assert decided[1].q_value > 0.05                     # within the latency margin: not evidence at all
    assert stats.mann_whitney(latency_base := list(rng.lognormal(np.log(100), 0.3, 20_000)),
                              list(rng.lognormal(np.log(103), 0.3, 20_000))) < 0.01   # though a point null says so
    assert not any(t.detected for t in decided)
    # Lowering the minimum effect for one metric name makes it fire.
    lowered = decide(proportion_tests([now], [[row] for row in base], 3), DriftConfig(min_effect={"error_rate": 0.001}))
    assert lowered[0].detected


def test_differences_are_not_mistaken_for_proportions():
    assert is_proportion(share("hit_rate", 3, 8))
    assert not is_proportion({"name": "paired_difference", "value": 0.1, "ci_low": 0.0, "ci_high": 0.2, "n": 60,
                              "unit": "ratio"})
    assert not is_proportion({"name": "penalty_effect", "value": 0.25, "ci_low": 0.1, "ci_high": 0.4, "n": 64,
                              "unit": "ratio"})
    assert not is_proportion({"name": "ttft_p50_ms", "value": 0.5, "n": 8, "unit": "ms"})


def test_itl_is_one_mean_gap_per_request_and_failed_requests_are_left_out():
    rows = [{"final": True, "chunk_offsets_ms": [10.0, 15.0, 30.0], "ttft_ms": 10.0, "end_ms": 31.0},
            {"final": True, "chunk_offsets_ms": [12.0], "ttft_ms": 12.0, "end_ms": 13.0},
            {"final": True, "error_type": "timeout", "chunk_offsets_ms": [1.0, 2.0], "ttft_ms": 1.0},
            {"final": False, "chunk_offsets_ms": [1.0, 2.0], "ttft_ms": 1.0}]
    assert request_values(rows, "itl_ms") == [10.0]
    assert request_values(rows, "ttft_ms") == [10.0, 12.0]
    assert request_values(rows, "e2e_ms") == [31.0, 13.0]


def _stored_night(store: Store, night: int, ttft_ms: float, errors: int, rng: np.random.Generator,
                  status: str = "complete") -> dict:
    run = add_run(store, f"n{night}", night, [
        *({"name": name, "value": ttft_ms, "labels": {"concurrency": 4}, "n": 24, "unit": "ms"}
          for name in ("ttft_p50_ms", "itl_p50_ms", "e2e_p50_ms")),
        share("error_rate", errors, 24, concurrency=4)], status=status)
    latency_samples(store, run["id"], list(rng.lognormal(np.log(ttft_ms), 0.2, 24)), concurrency=4)
    return run


@pytest.mark.parametrize("shifted", [False, True])
def test_drift_on_stored_runs_uses_the_previous_complete_runs_of_the_suite_and_target(tmp_path, shifted):
    rng = np.random.default_rng(5)
    config = ProberConfig.model_validate({"drift": {"baseline_runs": 4, "min_baseline_runs": 3}})
    with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        for night in range(3):
            first = _stored_night(store, night, 100, 0, rng)
            assert evaluate_run(store, config, first["id"]).checked == 0     # too little history: no test
        _stored_night(store, 3, 900, 20, rng, status="failed")          # not complete: not in the baseline
        add_run(store, "other-suite", 4, [share("error_rate", 24, 24, concurrency=4)], suite="divergence",
                target="emu")
        tonight = _stored_night(store, 5, 200 if shifted else 100, 6 if shifted else 0, rng)
        tests = {(t.kind, t.metric): t for t in drift_for_run(store, tonight, config.drift)}
        assert set(tests) == {("proportion", "error_rate"), ("latency", "ttft_ms"), ("latency", "itl_ms"),
                              ("latency", "e2e_ms")}
        assert {t.baseline_runs for t in tests.values()} == {3}
        evaluation = evaluate_run(store, config, tonight["id"])
    fired = {row["metric"] for row in evaluation.fired_now}
    if shifted:
        assert fired == {"error_rate", "ttft_ms", "e2e_ms"}       # ITL did not move
        assert tests[("latency", "ttft_ms")].effect == pytest.approx(1.0, abs=0.3)
    else:
        assert fired == set() and evaluation.firing == []
