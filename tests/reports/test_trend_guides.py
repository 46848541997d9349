"""An open trend shows why it is open: the baseline band a drift alert judged the metric against,
the SLO threshold, and the mark where the alert paged; a folded trend is drawn compact (a line per
series, no mark or tooltip per point). Unit-level on prober/reports/trend_guides.py and svg.py, and
end to end in the report site of tests/support/report_store.py, whose SLO alert fires."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from prober.reports.plots import MetricSeries, Point, over_time
from prober.reports.svg import render
from prober.reports.trend_guides import AlertOnTrend, add_guides, names_trend
from tests.support.cli import prober
from tests.support.report_store import EVIL_TARGET, write_cli_config

START = dt.datetime(2026, 11, 1, 2, tzinfo=dt.UTC)
NIGHTS = [START + dt.timedelta(days=i) for i in range(12)]
# Nine quiet nights between 95 and 105 ms, then the regression: 150 ms from night 9 on.
TTFT = [100, 95, 105, 98, 102, 97, 103, 99, 101, 150, 152, 149]


def _series() -> list[MetricSeries]:
    at_1 = MetricSeries("latency", "ttft_p50_ms", {"concurrency": 1}, "ms",
                        [Point(when, float(value)) for when, value in zip(NIGHTS, TTFT)])
    # another level, faster, that the alert's labels leave out of the band
    at_8 = MetricSeries("latency", "ttft_p50_ms", {"concurrency": 8}, "ms",
                        [Point(when, 400.0) for when in NIGHTS])
    return [at_1, at_8]


def _drift(**detail: object) -> AlertOnTrend:
    # latency's family ttft_ms reads the ttft_p50_ms rows: the alert names the family
    return AlertOnTrend("drift_ttft_ms", "drift", "latency", "ttft_ms", {"concurrency": 1}, NIGHTS[10],
                        {"drift_since": NIGHTS[9].isoformat(), "baseline_runs": 5, **detail})


@pytest.mark.unit
def test_a_drift_alert_draws_the_band_of_its_baseline_and_its_page():
    series = _series()
    plot = over_time(series, "ttft_p50_ms", "ttft_p50_ms", "ms")
    assert plot is not None
    assert names_trend(_drift(), "latency", "ttft_p50_ms")
    assert not names_trend(_drift(), "latency", "e2e_p50_ms")
    # an alert for families that page together names the trends of those that moved
    members = {"ttft_ms": "k1", "itl_ms": "k2", "e2e_ms": "k3"}
    group = AlertOnTrend("drift_latency", "drift", "latency", "latency", {}, NIGHTS[10],
                         {"families": ["ttft_ms", "itl_ms"], "members": members})
    named = [names_trend(group, "latency", t) for t in ("ttft_p50_ms", "itl_p50_ms", "e2e_p50_ms")]
    assert named == [True, True, False]
    assert not names_trend(group, "caching", "ttft_p50_ms")
    assert add_guides(plot, "latency", series, [_drift()])
    band = plot.band
    assert band is not None
    # the last five nights before the drift (nights 4-8: 102, 97, 103, 99, 101), concurrency 1 only
    assert (band.low, band.high, band.start) == (97.0, 103.0, NIGHTS[4])
    assert "the last 5 value(s) before the drift began (2026-11-10 02:00 UTC)" in band.label
    assert plot.pages == [(NIGHTS[10], "drift_ttft_ms paged 2026-11-11 02:00 UTC")]
    assert plot.levels == []

    svg = render(plot)
    rect = re.search(r'<rect class="baseline-band" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" '
                     r'height="([\d.]+)"', svg)
    assert rect is not None
    x, top, width, height = map(float, rect.groups())
    # The band spans 97..103 ms: between the pixel rows of points at 95 and 105, and the regressed
    # points (150) lie above it; it starts at night 4 and runs to the plot's right edge.
    ys = {round(float(cy), 1): value for cy, value in zip(
        re.findall(r'<circle class="point" cx="[\d.]+" cy="([\d.]+)"', svg)[:12], TTFT)}
    y_of = {value: cy for cy, value in ys.items()}
    assert y_of[105] < top < top + height < y_of[95]
    assert y_of[150] < top
    circles_x = [float(cx) for cx in re.findall(r'<circle class="point" cx="([\d.]+)"', svg)[:12]]
    assert circles_x[3] < x < circles_x[5] and abs(x + width - 664) < 1
    page = re.search(r'<line class="page-mark" x1="([\d.]+)"', svg)
    assert page is not None and circles_x[9] < float(page.group(1)) < circles_x[11]
    assert "baseline of drift_ttft_ms: 97 to 103" in svg and "drift_ttft_ms paged 2026-11-11 02:00 UTC" in svg


@pytest.mark.unit
def test_an_slo_rule_draws_its_threshold_and_unrelated_alerts_draw_nothing():
    series = _series()
    plot = over_time(series, "ttft_p50_ms", "ttft_p50_ms", "ms")
    assert plot is not None
    rule = AlertOnTrend("ttft-fast", "slo", "latency", "ttft_p50_ms", {}, None, {"comparator": "<=", "threshold": 120})
    other = AlertOnTrend("drift_e2e_ms", "drift", "latency", "e2e_ms", {}, NIGHTS[10],
                         {"drift_since": NIGHTS[9].isoformat(), "baseline_runs": 5})
    assert add_guides(plot, "latency", series, [rule, other])
    assert plot.band is None and plot.pages == []
    assert plot.levels == [(120.0, "SLO ttft-fast: healthy when <= 120")]
    svg = render(plot)
    level = re.search(r'<line class="slo-level" x1="64" y1="([\d.]+)"', svg)
    assert level is not None
    # the threshold's row lies between the points at 105 and 150 ms
    ys = [float(cy) for cy in re.findall(r'<circle class="point" cx="[\d.]+" cy="([\d.]+)"', svg)[:12]]
    assert ys[9] < float(level.group(1)) < ys[2]

    quiet = over_time(series, "ttft_p50_ms", "ttft_p50_ms", "ms")
    assert quiet is not None and not add_guides(quiet, "latency", series, [other])


@pytest.mark.unit
def test_a_compact_trend_draws_a_line_per_series_and_no_mark_per_point():
    plot = over_time(_series(), "ttft_p50_ms", "ttft_p50_ms", "ms")
    assert plot is not None
    full = render(plot)
    plot.compact = True
    compact = render(plot)
    assert full.count('<circle class="point"') == 24 and "<circle" not in compact
    assert compact.count('<polyline class="series"') == 2
    assert "concurrency=1: 12 point(s), latest 149, range 95 .. 152" in compact
    assert len(compact) < len(full) / 2


@pytest.mark.emulator
def test_the_report_opens_the_alerting_trend_with_its_guides_and_folds_the_rest(report_store, tmp_path: Path):
    tmp, config, _ = report_store
    write_cli_config(tmp, config)
    done = prober("report", "--out", str(tmp_path / "site"), cwd=tmp)
    assert done.returncode == 0, done.stderr
    latest = (tmp_path / "site" / "latest.html").read_text()
    section = latest.split('<section id="evil-img-src-x-onerror-alert-3-nightly">', 1)[1].split("</section>", 1)[0]
    trends = dict(re.findall(r'<details class="trend"(?: open)?>\n<summary>([^<]+)</summary>\n'
                             r'<figure class="trend-plot">.*?(<svg.*?</svg>)', section, re.S))
    opened = trends.pop("divergence_rate (alerting)")
    # no-divergence (at concurrency 16, healthy when <= 0.1) fires: its threshold and its page
    assert 'class="slo-level"' in opened and "SLO no-divergence: healthy when &lt;= 0.1" in opened
    assert opened.count('class="page-mark"') == 1 and "no-divergence paged" in opened
    assert 'class="chart"' in opened and '<circle class="point"' in opened
    # every other trend is folded and compact
    assert trends and all('class="chart compact"' in svg and "<circle" not in svg and "slo-level" not in svg
                          for svg in trends.values()), [name for name, svg in trends.items() if "<circle" in svg]
    assert EVIL_TARGET not in section     # (stored text stays escaped)
