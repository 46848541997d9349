"""The minimum detectable effect a latency family states (stats.night_shift_detectable) against a
simulation through the real drift code: for three night-to-night noise levels, a TTFT shift equal
to the stated effect is paged within two nights in 85-95% of histories (the statement is neither
optimistic nor useless)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prober.alerting.drift import EACH_NIGHT_P, decide, target_tests
from prober.alerting.run_values import run_values
from prober.core import stats
from prober.core.config import DriftConfig

pytestmark = pytest.mark.unit

HISTORIES = 300
CONFIG = DriftConfig(baseline_runs=28, min_baseline_runs=7, min_effect={"latency": 0.0})


def _night(ttft_p50_ms: float) -> dict:
    return run_values([{"target": "t", "probe": "latency", "name": "ttft_p50_ms", "labels": {"concurrency": 1},
                        "value": ttft_p50_ms, "n": 400, "unit": "ms"}])


def _pages(current: dict, baseline: list[dict]) -> tuple[bool, float | None]:
    """Whether tonight pages the TTFT family, and the two-night test's level."""
    tests, _ = target_tests("t", current, baseline, CONFIG)
    decided = decide(tests, CONFIG)
    two = [t.alpha for t in decided if t.nights == 2]
    return any(t.pages for t in decided), (two[0] if two else None)


@pytest.mark.parametrize("night_sd", [0.05, 0.10, 0.20])
def test_a_shift_of_the_stated_detectable_effect_pages_within_two_nights_nine_times_in_ten(night_sd):
    rng = np.random.default_rng(int(night_sd * 1000))
    paged = 0
    for _ in range(HISTORIES):
        logs = list(rng.normal(math.log(40), night_sd, CONFIG.baseline_runs + 1))
        baseline = [_night(math.exp(v)) for v in logs[::-1]]        # newest first
        _, alpha = _pages(_night(math.exp(logs[-1])), baseline)
        assert alpha is not None
        # stated from the newest baseline_runs nights: the baseline of the second night's two-night test
        shift = stats.night_shift_detectable(logs[-CONFIG.baseline_runs:], alpha, 0.9,
                                             stats.LATENCY_LOG_VARIANCE_FLOOR, EACH_NIGHT_P)
        assert shift is not None
        first = _night(math.exp(math.log(40) + shift + rng.normal(0, night_sd)))
        found, _ = _pages(first, baseline[:CONFIG.baseline_runs + 1])
        if not found:
            second = _night(math.exp(math.log(40) + shift + rng.normal(0, night_sd)))
            found, _ = _pages(second, [first, *baseline][:CONFIG.baseline_runs + 1])
        paged += found
    assert 0.85 * HISTORIES <= paged <= 0.95 * HISTORIES, paged / HISTORIES


def test_tests_without_p_values_state_the_same_power_and_levels():
    # `prober show` and `drift-power` decide the tests without their p-values: every test's level and
    # stated power are those of the full decision (they depend on which families are tested), none
    # detected. Shares and a second latency family change the levels the budget splits into.
    rng = np.random.default_rng(7)

    def night(ttft: float, e2e: float, share: float) -> dict:
        return run_values([
            {"target": "t", "probe": "latency", "name": "ttft_p50_ms", "labels": {"concurrency": 1},
             "value": ttft, "n": 400, "unit": "ms"},
            {"target": "t", "probe": "latency", "name": "e2e_p50_ms", "labels": {"concurrency": 1},
             "value": e2e, "n": 400, "unit": "ms"},
            {"target": "t", "probe": "caching", "name": "hit_rate", "labels": {"case": "repeat"},
             "value": share, "n": 40, "ci_low": 0.5, "unit": "ratio"}])

    nights = [night(40 * math.exp(rng.normal(0, 0.1)), 90 * math.exp(rng.normal(0, 0.2)),
                    int(rng.integers(24, 36)) / 40)
              for _ in range(CONFIG.baseline_runs + 2)]
    full = decide(target_tests("t", nights[0], nights[1:], CONFIG)[0], CONFIG)
    bare = decide(target_tests("t", nights[0], nights[1:], CONFIG, p_values=False)[0], CONFIG)
    assert {t.kind for t in full} == {"latency", "proportion"} and any(t.detectable for t in full)
    assert [(t.key, t.nights, t.alpha, t.min_effect, t.detectable, t.night_variance) for t in bare] == \
        [(t.key, t.nights, t.alpha, t.min_effect, t.detectable, t.night_variance) for t in full]
    assert all(t.p_value is None and not t.detected for t in bare)
    assert all(t.p_value is not None for t in full)
