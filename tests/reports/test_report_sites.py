"""A report shows one target's sites side by side: a section per target, suite and site, the
sections of one target and suite next to each other, and the contents table with a site column."""

from __future__ import annotations

import re

import pytest

from prober.alerting.verdicts import ReportVerdicts
from prober.core.config import SloRule
from prober.reports.collect import collect
from prober.reports.html import render_html
from prober.reports.markdown import render_markdown
from prober.reports.prometheus import describe, exposition, recent_runs
from prober.store import Store
from tests.support.history import add_run

pytestmark = pytest.mark.unit


def _night(store: Store, run_id: str, night: int, site: str, ttft_ms: float, target: str = "emu") -> None:
    add_run(store, run_id, night, [{"name": "ttft_p50_ms", "value": ttft_ms, "labels": {"concurrency": 4},
                                    "n": 24, "unit": "ms"}], site=site, target=target)


def test_sections_per_site_side_by_side_with_their_own_values(tmp_path):
    rule = SloRule(name="ttft", metric="ttft_p50_ms", comparator="<=", threshold=200)
    with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        for night in range(3):
            _night(store, f"fra{night}", 2 * night, "fra", 100 + night)
            _night(store, f"iad{night}", 2 * night + 1, "iad", 300 + night)
        _night(store, "solo", 7, "fra", 50, target="other")
        report = collect(store, ReportVerdicts([rule]))
    assert [(s.target, s.site, s.anchor) for s in report.sections] == [
        ("emu", "fra", "emu-latency-fra"), ("emu", "iad", "emu-latency-iad"), ("other", "fra", "other-latency")]
    fra, iad, _ = report.sections
    assert [run.id for run in fra.runs] == ["fra0", "fra1", "fra2"] and fra.latest_run.id == "fra2"
    assert fra.probes[0].metrics[0].recent == [100, 101, 102] and iad.probes[0].metrics[0].recent == [300, 301, 302]
    assert [r.broken for _, r in fra.slo_results] == [False] and [r.broken for _, r in iad.slo_results] == [True]

    page = render_html(report)
    contents = page.split('<table class="contents">', 1)[1].split("</table>", 1)[0]
    assert re.findall(r'<a href="#([\w-]+)">[^<]*</a></td><td>(\w+)</td>', contents) == [
        ("emu-latency-fra", "fra"), ("emu-latency-iad", "iad"), ("other-latency", "fra")]
    assert '<h2>emu / latency <span class="site">from iad</span></h2>' in page
    markdown = render_markdown(report)
    assert markdown.index("## emu / latency (site fra)") < markdown.index("## emu / latency (site iad)")


def test_the_prometheus_textfile_has_the_latest_run_of_every_site(tmp_path):
    with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        for night in range(2):
            _night(store, f"fra{night}", 2 * night, "fra", 100 + night)
            _night(store, f"iad{night}", 2 * night + 1, "iad", 300 + night)
        text = exposition(store.metric_history(), runs=recent_runs(store))
        shown = describe(store.metric_history())
    gauges = re.findall(r'^prober_latency_ttft_p50_seconds\{(.*)\} (\S+)$', text, re.MULTILINE)
    assert sorted(gauges) == [('concurrency="4",site="fra",suite="latency",target="emu"', "0.101"),
                              ('concurrency="4",site="iad",suite="latency",target="emu"', "0.301")]
    complete = re.findall(r'^prober_run_status\{site="(\w+)",status="complete".*\} 1\.0$', text, re.MULTILINE)
    assert sorted(complete) == ["fra", "iad"]
    assert shown == "emu / latency from fra: run fra1; emu / latency from iad: run iad1"
