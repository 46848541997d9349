"""The minimum detectable effect a latency family states (stats.night_shift_detectable) against a
simulation through the real drift code: for three night-to-night noise levels, a TTFT shift equal
to the stated effect is paged within two nights in 85-95% of histories (the statement is neither
optimistic nor useless)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prober.alerting.drift import EACH_NIGHT_P, decide, run_values, target_tests
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
