"""The alarm-calibration benchmark (bench/alarm_calibration.py) in a reduced form: quiet nights of
the simulated nightly suite through the real drift, SLO and alert code stay within the page budget
at the high noise level, and every regression is paged within two nights at the noise level the
benchmark judges detection at. The full benchmark and its table are in docs/operations.md."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import alarm_calibration as bench  # noqa: E402

pytestmark = pytest.mark.unit


@pytest.mark.timeout(600)
def test_quiet_nights_at_high_noise_stay_within_the_page_budget():
    nights = 120
    pages, _ = bench.noise_level(bench.default_config(), bench.NOISE_LEVELS[-1], nights, histories=0, seed=11)
    # The budget allows 120 / 90 = 1.3 pages; 3 leaves room for a Poisson count at that mean
    # (P(X > 3) = 0.05); a policy at four times the budget fails this three times in four, and the
    # previous policy (26 pages per 90 nights here) always.
    allowed = math.ceil(nights / 90) + 1
    assert len(pages) <= allowed, pages


@pytest.mark.timeout(600)
def test_every_regression_pages_within_two_nights():
    histories = 20
    _, delays = bench.noise_level(bench.default_config(), bench.REGRESSION_NOISE, nights=2 * histories,
                                  histories=histories, seed=12)
    for regression in bench.REGRESSIONS:
        found = delays[regression.name]
        assert len(found) == histories
        within = sum(1 for d in found if d is not None and d <= 2) / histories
        assert within >= 0.9, (regression.name, found)
