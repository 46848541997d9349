"""The client's own overhead beside latency figures in the report, and the mark when it is more
than 10% of the figure (issue 13, item 5): calibration and latency runs in a real SQLite store."""

from __future__ import annotations

import datetime as dt

import pytest

from prober.alerting.verdicts import ReportVerdicts
from prober.core.records import Metric, Run
from prober.reports.calibration import host_calibration
from prober.reports.collect import collect
from prober.reports.html import render_html
from prober.reports.markdown import render_markdown
from prober.store import Store

pytestmark = pytest.mark.unit

START = dt.datetime(2026, 11, 30, 2, 0, tzinfo=dt.UTC)


def _run(store: Store, run_id: str, suite: str, host: str, minutes: int, target: str,
         metrics: list[tuple[str, dict, float]]) -> None:
    started = START + dt.timedelta(minutes=minutes)
    store.create_run(Run(id=run_id, suite=suite, started_at=started, prober_version="test", config_hash="h",
                         host=host, pid=1, targets=[target]))
    probe = "calibration" if suite == "calibrate" else "latency"
    store.write_metrics([Metric(run_id=run_id, target=target, probe=probe, name=name, value=value, labels=labels,
                                n=400, unit="ms") for name, labels, value in metrics])
    store.finish_run(run_id, "complete", started + dt.timedelta(minutes=1))


@pytest.fixture
def store(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path}/p.db")
    _run(store, "cal-old", "calibrate", "night-host", 0, "calibration",
         [("ttft_overhead_p50_ms", {"concurrency": 64}, 90.0)])       # superseded by the next one
    _run(store, "cal-new", "calibrate", "night-host", 10, "calibration",
         [("ttft_overhead_p50_ms", {"concurrency": 1}, 0.5), ("ttft_overhead_p50_ms", {"concurrency": 64}, 4.0),
          ("ttft_overhead_p99_ms", {"concurrency": 1}, 2.0), ("ttft_overhead_p99_ms", {"concurrency": 64}, 30.0)])
    _run(store, "cal-other", "calibrate", "other-host", 15, "calibration",
         [("ttft_overhead_p50_ms", {"concurrency": 64}, 500.0)])      # another machine's: never used here
    _run(store, "lat", "latency", "night-host", 20, "api",
         [("ttft_p50_ms", {"concurrency": 16}, 100.0),     # overhead 4 ms at c=64: 4%, shown, not marked
          ("ttft_p99_ms", {"concurrency": 16}, 200.0),     # 30 ms: 15%, marked
          ("ttft_p99_ms", {"concurrency": 1}, 15.0),       # 2 ms of 15: 13%, marked
          ("itl_p50_ms", {"concurrency": 16}, 20.0),       # no ITL calibration: nothing shown
          ("error_rate", {"concurrency": 16}, 0.0)])
    yield store
    store.close()


def test_the_hosts_latest_calibration_applies_by_percentile_and_level(store):
    calibration = host_calibration(store, "lat")
    assert calibration is not None and calibration.run_id == "cal-new"
    p50 = calibration.for_figure("ttft_p50_ms", {"concurrency": 16})
    assert p50 is not None and p50.value_ms == 4.0 and not p50.marks(100.0)
    p99 = calibration.for_figure("ttft_p99_ms", {"concurrency": 16})
    assert p99 is not None and p99.value_ms == 30.0 and p99.marks(200.0)
    assert calibration.for_figure("ttft_p99_ms", {"concurrency": 512}).value_ms == 30.0   # beyond: the highest
    assert calibration.for_figure("ttft_p99_ms", {}).value_ms == 30.0                   # unknown load: the worst
    assert calibration.for_figure("itl_p50_ms", {"concurrency": 16}) is None
    assert calibration.for_figure("error_rate", {"concurrency": 16}) is None
    assert host_calibration(store, "cal-new") is None          # a calibration is not judged by itself


def test_the_report_shows_the_overhead_and_marks_a_figure_it_is_over_10_percent_of(store):
    report = collect(store, ReportVerdicts([]))   # no rules, no drift: no verdicts to draw
    (section,) = [s for s in report.sections if s.suite == "latency"]
    shown = {(m.name, m.labels["concurrency"]): m for p in section.probes for m in p.metrics}
    assert shown[("ttft_p50_ms", 16)].overhead.value_ms == 4.0
    assert shown[("itl_p50_ms", 16)].overhead is None and shown[("error_rate", 16)].overhead is None

    markdown = render_markdown(report)
    # Markdown escapes the underscores of a metric name: key the table rows by name and labels.
    rows = {}
    for line in markdown.splitlines():
        cells = [cell.strip() for cell in line.replace("\\_", "_").split("|")]
        if len(cells) > 4 and cells[1].endswith("_ms"):
            rows[(cells[1], cells[2])] = line
    assert "(client overhead 4 ms)" in rows[("ttft_p50_ms", "concurrency=16")]
    assert "(client overhead 30 ms (client))" in rows[("ttft_p99_ms", "concurrency=16")]
    assert "(client overhead 2 ms (client))" in rows[("ttft_p99_ms", "concurrency=1")]
    assert "client overhead" not in rows[("itl_p50_ms", "concurrency=16")]
    assert "run cal-new" in markdown and "more than 10% of the figure" in markdown

    html = render_html(report)
    assert html.count("(client overhead 30 ms (client))") == 1 and "(client overhead 4 ms)" in html
    assert "500" not in markdown.split("## api / latency")[1].split("##")[0]   # the other host's calibration
