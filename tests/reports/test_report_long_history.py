"""A report over a long history stays bounded: the newest DETAIL_RUNS runs of a target and suite are
drawn point by point and the older runs of the window one point per period (their mean, min..max),
so the page does not grow with the history in its window; only the newest runs get a page; and a
period's point is the database's aggregate of exactly the complete runs it covers."""

from __future__ import annotations

import datetime as dt
import statistics
import sys
from pathlib import Path

import pytest

from prober.alerting.verdicts import ReportVerdicts
from prober.reports.collect import DETAIL_RUNS, MAX_PERIODS, collect, load_window, run_page_name
from prober.reports.html import render_html
from prober.reports.site import RUN_PAGES, write_site
from prober.store import Store
from tests.support.history import nightly_template_store

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import history_scale as bench

END = dt.datetime(2026, 6, 30, 12, tzinfo=dt.UTC)
TARGETS = 2


def _report(store: Store, out: Path) -> tuple[int, int, list[int]]:
    """(latest.html bytes, run pages written, points per trend series) of the report over all history."""
    verdicts = ReportVerdicts([])
    window = load_window(store)
    report = collect(store, verdicts, window=window)
    write_site(store, verdicts, report, out, window)
    points = [len(series.points) for section in report.sections for probe in section.probes
              for plot in probe.trends for series in plot.series]
    return (out / "latest.html").stat().st_size, len(list((out / "runs").glob("*.html"))), points


@pytest.mark.unit
def test_long_history_report_is_bounded_and_summarized(tmp_path: Path) -> None:
    template_url = f"sqlite:///{tmp_path / 'template.db'}"
    nightly_template_store(template_url, levels=(1, 4), requests_per_level=8)
    template = bench.load_template(template_url)
    url = f"sqlite:///{tmp_path / 'history.db'}"
    bench.write_history(url, 40, TARGETS, template, end=END)
    with Store.open(url) as store:
        short_size, short_pages, short_points = _report(store, tmp_path / "short")
    bench.write_history(url, 160, TARGETS, template, end=END)      # four times the history, all in the window
    with Store.open(url) as store:
        long_size, long_pages, long_points = _report(store, tmp_path / "long")
        report = collect(store, ReportVerdicts([]))
        rows = store.metric_history(target=report.sections[0].target, name="ttft_p50_ms")
    section = report.sections[0]

    assert max(long_points) <= DETAIL_RUNS + MAX_PERIODS and max(short_points) <= DETAIL_RUNS + MAX_PERIODS
    # four times the runs in the window, at most 27 points a series instead of 18 (it was 160 instead of 40)
    assert long_size <= 1.5 * short_size, (short_size, long_size)
    assert short_pages == long_pages == RUN_PAGES                   # one suite: its newest runs

    # a period's point: the mean, min and max of the complete runs it covers, as stored
    trend = next(plot for probe in section.probes for plot in probe.trends if plot.title == "ttft_p50_ms")
    series = next(s for s in trend.series if s.label == "concurrency=1")
    assert len(section.runs) == 160 and len(series.points) < 160
    older, newest = series.points[:-DETAIL_RUNS], series.points[-DETAIL_RUNS:]
    assert [p.x for p in newest] == [r.started_at for r in section.runs[-DETAIL_RUNS:]]
    values = {row["run_started_at"]: row["value"] for row in rows if row["labels"] == {"concurrency": 1}}
    first = older[0]
    start = dt.datetime.strptime(first.note.split(" to ")[0], "%Y-%m-%d").replace(tzinfo=dt.UTC)
    last_day = dt.datetime.strptime(first.note.split(" to ")[1][:10], "%Y-%m-%d").replace(tzinfo=dt.UTC)
    covered = [v for when, v in values.items() if start <= when < last_day + dt.timedelta(days=1)]
    assert covered and first.y == pytest.approx(statistics.mean(covered))
    assert (first.low, first.high) == (pytest.approx(min(covered)), pytest.approx(max(covered)))
    assert f"mean of {len(covered)} run(s)" in first.note
    assert "one point per period" in render_html(report)


@pytest.mark.unit
def test_each_site_gets_a_week_of_run_pages(tmp_path: Path) -> None:
    # two sites run the suite every night: RUN_PAGES of each site's newest runs get a page, not
    # RUN_PAGES across both (half a week each)
    template_url = f"sqlite:///{tmp_path / 'template.db'}"
    nightly_template_store(template_url, levels=(1,), requests_per_level=4)
    url = f"sqlite:///{tmp_path / 'history.db'}"
    written = bench.write_history(url, RUN_PAGES + 3, 1, bench.load_template(template_url), end=END, sites=2)
    with Store.open(url) as store:
        verdicts = ReportVerdicts([])
        window = load_window(store)
        write_site(store, verdicts, collect(store, verdicts, window=window), tmp_path / "site", window)
        sites = {run["id"]: run["site"] for run in store.list_runs(limit=100, counts=False)}
    pages = {path.stem for path in (tmp_path / "site" / "runs").glob("*.html")}
    newest = {site: [run for run in reversed(written) if sites[run] == site][:RUN_PAGES]
              for site in bench.site_names(2)}
    assert {run_page_name(run).removesuffix(".html") for runs in newest.values() for run in runs} == pages
