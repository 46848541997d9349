"""The alarm-calibration benchmark (bench/alarm_calibration.py) in a reduced form: quiet nights of
the simulated nightly suite through the real drift, SLO and alert code stay within the page budget
at the high noise level, and every regression is paged within two nights at the noise level the
benchmark judges detection at. The full benchmark and its table are in docs/operations.md.

Pages are too rare to judge a budget of one per 90 nights on a few hundred nights (3 expected
pages, Poisson sd 1.7, and a latency page comes in threes). So the budget is judged on the
regression tests that reach ten times their level: ten times as many, they estimate the same
spend (tails near the level are about linear in it). Before issue 30's policy (tonight alone
paging, nights taken as independent), the high-noise check measured 12 such tests against its
bound of 30 and the same code at twice the budget 33; the autocorrelated check states its own
figures. Detection: every regression paged within two nights in at least 0.9 of 40 histories and
0.95 on average (measured 0.975-1.0 at seed 12)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import alarm_calibration as bench

pytestmark = pytest.mark.unit

QUIET_NIGHTS = 270          # three budget periods of 90 nights
HISTORIES = 40
CREEP_HISTORIES = 20


def quiet_spend(config, seed: int = 11, model: str = "high") -> bench.LevelResult:
    return bench.noise_level(config, bench.MODELS[model], QUIET_NIGHTS, histories=0, seed=seed)


def detection_within_two_nights(config, seed: int = 12) -> dict[str, float]:
    result = bench.noise_level(config, bench.REGRESSION_NOISE, nights=HISTORIES, histories=HISTORIES, seed=seed)
    shares = {}
    for regression in bench.REGRESSIONS:
        if not regression.target:
            continue
        found = result.delays[regression.name]
        assert len(found) == HISTORIES
        shares[regression.name] = sum(1 for d in found if d is not None and d <= 2) / HISTORIES
    return shares


@pytest.mark.timeout(600)
def test_quiet_nights_at_high_noise_stay_within_the_page_budget():
    config = bench.default_config()
    result = quiet_spend(config)
    periods = QUIET_NIGHTS / 90 * config.drift.false_pages_per_90_nights
    # The spend: tests at 10x their level, over 10, at most the budget of these nights (3 pages:
    # 30 tests). Over 4000 nights the default policy averaged 15 per 270 nights.
    assert result.near_level / bench.NEAR_FACTOR <= periods, result.near_level
    # And the pages themselves: twice the budget leaves room for one latency night (three pages).
    assert len(result.pages) <= 2 * periods, result.pages


def autocorrelated_spend(config) -> tuple[float, float]:
    """(tests at 10x their level over 10, the budget of the nights run) under AR(1) rho 0.5."""
    result = quiet_spend(config, seed=13, model="low rho 0.5")
    return result.near_level / bench.NEAR_FACTOR, result.nights_run / 90 * config.drift.false_pages_per_90_nights


@pytest.mark.timeout(600)
def test_quiet_autocorrelated_nights_stay_within_the_page_budget():
    # Nights with AR(1) rho 0.5 night effects (issue 30): the spend stays within the budget. Here
    # the default policy spends 1.5 of the 3.0 these 270 nights allow; the tests that took nights
    # as independent spent 1.9 per 90 nights at rho 0.5 (5.7 here).
    config = bench.default_config()
    spend, budget = autocorrelated_spend(config)
    assert spend <= budget, (spend, budget)
    # The check sees a policy twice over budget: the same code at seven times its level spends
    # 2.1x the budget (6.4 of 3.0; at 4x it spends 4.1, at 6x 5.8) and fails it.
    over = bench.default_config()
    over.drift.false_pages_per_90_nights *= 7
    assert autocorrelated_spend(over)[0] > 2 * budget


@pytest.mark.timeout(900)
def test_a_slow_creep_pages_within_40_nights():
    # TTFT +0.5% a night from a branch point on (issue 30, item 4): the trend window pages it within
    # 40 nights in most histories, none of which paged before the creep began. Since a trend pages
    # only with the latest two nights out of the baseline's range (drift.TREND_RECENT_P, what kept
    # a wander at rho 0.8 from paging every other night), 13 of these 20 (0.65) are paged within
    # 40 nights where 15 or more were before; 0.6 still fails a trend window that misses creeps.
    config = bench.default_config()
    creep = next(r for r in bench.REGRESSIONS if r.creep)
    result = bench.noise_level(config, bench.REGRESSION_NOISE, nights=CREEP_HISTORIES, histories=CREEP_HISTORIES,
                               seed=14, regressions=[creep])
    found = result.delays[creep.name]
    assert len(found) == CREEP_HISTORIES
    assert bench.detected_share(found, bench.CREEP_WITHIN) >= 0.6, found


def persistent_history(config, shift_from: int, shift_until: int, nights: int, seed: int = 21):
    """Per night from `shift_from` on: (pages, resolved, new normal notices) of TTFT-family alerts,
    TTFT p50 +50% over nights [shift_from, shift_until)."""
    rng = np.random.default_rng(seed)
    history, weather = bench.History(config), bench.Weather(bench.MODELS["low"])
    events = []
    for index in range(nights):
        levels = bench.healthy_levels()
        if shift_from <= index < shift_until:
            levels["ttft_factor"] = 1.5
        fired = history.night(bench.Night(rng, weather, levels, index).rows, index)
        if index >= shift_from:
            # TTFT pages in the latency group's alert (prober.alerting.drift.page_group)
            events.append(tuple([row for row in rows if "ttft_ms" in (row["detail"].get("members") or ())]
                                for rows in (fired, history.resolved, history.new_normal)))
    return events


@pytest.mark.timeout(600)
def test_a_persistent_regression_pages_once_and_stays_open_until_it_recovers():
    config = bench.default_config()
    # TTFT +50% from night 60 on for 12 nights (fewer than new_normal_nights), then recovered.
    events = persistent_history(config, 60, 72, 76)
    pages = [night for night, (fired, _, _) in enumerate(events) if fired]
    resolves = [night for night, (_, resolved, _) in enumerate(events) if resolved]
    assert len(pages) == 1 and pages[0] <= 1, pages            # paged within two nights, once
    assert resolves and min(resolves) >= 12, resolves           # never resolved while it lasted...
    assert resolves == [resolves[0]] and resolves[0] <= 13, resolves   # ...and resolved on recovery


@pytest.mark.timeout(600)
def test_a_regression_that_lasts_becomes_the_new_normal_once():
    config = bench.default_config()
    events = persistent_history(config, 60, 10_000, 60 + config.drift.new_normal_nights + 8)
    pages = [night for night, (fired, _, _) in enumerate(events) if fired]
    new_normal = [night for night, (_, _, notices) in enumerate(events) if notices]
    resolves = [night for night, (_, resolved, _) in enumerate(events) if resolved]
    assert len(pages) == 1 and not resolves, (pages, resolves)
    # One notice, new_normal_nights after the page; the level it re-baselined on pages no more.
    assert new_normal == [pages[0] + config.drift.new_normal_nights], new_normal


@pytest.mark.timeout(600)
def test_every_regression_pages_within_two_nights():
    shares = detection_within_two_nights(bench.default_config())
    # 0.9 of 40: at most 4 misses, which a regression detected at 0.95 exceeds 1 time in 20 and
    # one detected at 0.8 stays within 1 time in 13.
    assert all(share >= 0.9 for share in shares.values()), shares
    # Over all six (240 histories) the target itself: the mean share must reach 0.95.
    assert sum(shares.values()) / len(shares) >= 0.95, shares


def test_a_detection_share_whose_misses_share_a_baseline_has_a_wider_interval():
    # 35 of 40 histories, the five misses four neighbours and one alone (400 nights, branch points
    # 10 nights apart: runs of 6 share most of a 56-night baseline), against the same misses spread
    found = [2] * 23 + [None] * 4 + [2] * 12 + [None]
    spread = [None if i % 8 == 3 else 2 for i in range(40)]
    assert bench.detected_share(found) == bench.detected_share(spread) == 0.875
    clustered, alone = bench.detected_interval(found, 2, 6), bench.detected_interval(spread, 2, 6)
    assert clustered[0] < alone[0] < 0.875 < alone[1] <= clustered[1] < 1
    # independent histories: the Wilson interval of 35 of 40
    assert bench.detected_interval(found, 2, 1) == pytest.approx((0.739, 0.945), abs=0.001)
    assert bench.detected_interval([2] * 40, 2, 6)[1] == 1.0
