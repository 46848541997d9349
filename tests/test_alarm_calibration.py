"""The alarm-calibration machinery (bench/alarm_calibration.py) in a reduced form: quiet nights of
the simulated nightly suite through the real drift, SLO and alert code stay within the page budget
at the low noise level, and the regressions the policy detects fast are paged within two nights.
The full benchmark and its measured shortfalls at higher noise are in docs/operations.md."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import alarm_calibration as bench  # noqa: E402


@pytest.mark.timeout(600)
def test_quiet_nights_at_low_noise_stay_within_the_page_budget():
    _, share_sd, latency_sd = bench.NOISE_LEVELS[0]
    pages, names = bench.false_pages(bench.default_config(), share_sd, latency_sd, nights=90, seed=11)
    assert pages <= 1, names


@pytest.mark.timeout(600)
@pytest.mark.parametrize("regression", [r for r in bench.REGRESSIONS if r.name.startswith("error rate")],
                         ids=lambda r: r.name)
def test_a_clear_regression_pages_within_two_nights(regression):
    delays = [bench.nights_to_detection(bench.default_config(), regression, seed) for seed in range(5)]
    assert all(d is not None and d <= 2 for d in delays), delays
