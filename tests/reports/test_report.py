"""`prober report`: a store with real runs of several suites (run and judged as `prober run` does,
against the in-process emulator) plus hand-written history and hostile text, rendered as HTML,
Markdown and JSON; the HTML checked for inertness as text and in headless Chromium."""

from __future__ import annotations

import datetime as dt
import html
import json
import math
import re
from pathlib import Path

import pytest
from markupsafe import escape

from prober.alerting.verdicts import ReportVerdicts
from prober.core.errors import ConfigError
from prober.reports.collect import collect, parse_since
from prober.reports.html import render_html
from prober.reports.json_report import render_json
from prober.reports.markdown import code_block, render_markdown, text
from prober.reports.plots import suite_plots
from prober.reports.svg import render
from tests.support.chromium import chromium
from tests.support.cli import prober
from tests.support.report_store import EVIL_TARGET, IMG, SCRIPT


@pytest.mark.emulator
def test_report_model_covers_every_target_and_suite(report_store):
    _, config, store = report_store
    report = collect(store, ReportVerdicts(config.slo))
    sections = {(s.target, s.suite): s for s in report.sections}
    assert set(sections) == {("emulator", "divergence"), ("emulator", "latency"), ("emulator", "caching"),
                             ("emulator-openai", "penalty"), ("emulator-openai", "schema_order"),
                             (EVIL_TARGET, "nightly")}
    caching = sections[("emulator", "caching")]
    assert len(caching.runs) == 2 and caching.latest_run.id == caching.runs[-1].id
    # the trend of the repeat case's hit rate has one point per run
    hit_rate = next(p for p in caching.probes[0].plots if p.title.startswith("Cache hit rate"))
    repeat = next(s for s in hit_rate.series if s.label.startswith("case=repeat"))
    assert len(repeat.points) == 2

    latency = sections[("emulator", "latency")]
    ttft = next(p for p in latency.probes[0].plots if p.title.startswith("TTFT"))
    assert {s.label for s in ttft.series} == {"ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms"}
    assert [p.x for p in ttft.series[0].points] == [1, 2, 4]
    assert [r.rule for _, r in latency.slo_results] == ["ttft-generous"] * 3
    assert not any(r.broken for _, r in latency.slo_results)

    divergence = sections[("emulator", "divergence")].probes[0]
    rate = next(p for p in divergence.plots if p.title.startswith("Divergence rate"))
    assert {s.label for s in rate.series} == {"prompt=review_json", "prompt=story"}
    assert all(p.low is not None and p.high is not None for s in rate.series for p in s.points)

    evil = sections[(EVIL_TARGET, "nightly")]
    assert [p.probe for p in evil.probes] == ["divergence", "penalty", "schema_order"]
    broken = [(m.labels, r.rule) for m, r in evil.slo_results if r.broken]
    assert broken == [({"prompt": SCRIPT, "concurrency": 16}, "no-divergence")]
    penalty = evil.probes[1]
    against_penalty, against_length = penalty.plots
    assert against_penalty.title.startswith("Corruption against penalty")
    # cells pooled per penalty; the explicit baseline is the penalty's no-op point (frequency 0)
    [curve] = against_penalty.series
    assert curve.label == "penalty=frequency_penalty"
    assert [(p.x, p.y, p.note) for p in curve.points] == [(0.0, 0.05, "2/40 pooled"), (0.5, 0.25, "10/40 pooled"),
                                                          (1.0, 0.5, "20/40 pooled")]
    assert all(p.low < p.y < p.high for p in curve.points)
    assert [s.label for s in against_length.series] == ["penalty=frequency_penalty", "penalty=none"]
    assert [p.x for p in against_length.series[0].points] == [5, 20]
    schema = evil.probes[2].plots[0]
    assert [p.x for p in schema.series[0].points] == ["answer_first", "reasoning_first"]
    assert schema.note == "mcnemar_p (a=answer_first, b=reasoning_first) = 0.0123"
    divergence_trend = next(p for p in evil.probes[0].trends if p.title == "divergence_rate")
    assert [p.y for p in divergence_trend.series[0].points] == [0.05, 0.1, 0.5]
    whys = [e.why for e in evil.probes[0].examples]
    assert whys.count("differs from the most common output of its prompt") == 2 and "failed: server_error" in whys
    assert evil.probes[1].examples[0].why.startswith("corrupted JSON: ")


@pytest.mark.emulator
def test_penalty_and_schema_order_runs_get_their_plots(report_store):
    _, config, store = report_store
    sections = {(s.target, s.suite): s for s in collect(store, ReportVerdicts(config.slo)).sections}
    [penalty] = sections[("emulator-openai", "penalty")].probes
    titles = [p.title.split(" (")[0] for p in penalty.plots]
    assert titles == ["Corruption against penalty", "Corruption against length", "JSON parse rate against penalty"]
    [curve] = penalty.plots[0].series
    assert curve.label == "penalty=frequency_penalty" and [p.x for p in curve.points] == [0.0, 0.5, 1.5]
    assert {s.label for s in penalty.plots[1].series} >= {"penalty=frequency_penalty", "penalty=none"}
    assert all(p.note.endswith("pooled") for s in penalty.plots[1].series for p in s.points)
    [schema] = sections[("emulator-openai", "schema_order")].probes
    accuracy = schema.plots[0]
    assert [p.x for p in accuracy.series[0].points] == ["answer_first", "reasoning_first"]
    assert all(p.low is not None for p in accuracy.series[0].points)
    assert accuracy.note.startswith("mcnemar_p (a=answer_first, b=reasoning_first) = ")
    assert "paired_difference" in accuracy.note
    assert penalty.examples and all(e.why.startswith("corrupted JSON: ") for e in penalty.examples)


@pytest.mark.unit
def test_suite_plots_degrade_when_metrics_are_missing():
    assert suite_plots("latency", [], []) == []
    only_p50 = [{"name": "ttft_p50_ms", "labels": {"concurrency": 4}, "value": 12.0, "unit": "ms", "n": 3}]
    plots = suite_plots("latency", only_p50, [])
    assert [(p.title, [s.label for s in p.series]) for p in plots] == [("TTFT percentiles against concurrency",
                                                                        ["ttft_p50_ms"])]
    without_label = [{"name": "corruption_rate", "labels": {}, "value": 0.1, "n": 10}]
    assert suite_plots("penalty", without_label, []) == []
    assert suite_plots("a_probe_from_the_future", only_p50, []) == []
    # a bound that is not a number is dropped, not drawn at "nan"
    odd = [{"name": "divergence_rate", "labels": {"concurrency": c, "prompt": "p"}, "value": 0.1 * c,
            "ci_low": math.nan, "ci_high": 0.5, "n": 4} for c in (1, 4)]
    [plot] = suite_plots("divergence", odd, [])
    assert all(p.low is None and p.high is None for p in plot.series[0].points)
    assert "nan" not in render(plot).lower()


@pytest.mark.emulator
def test_html_escapes_stored_text(report_store):
    _, config, store = report_store
    page = render_html(collect(store, ReportVerdicts(config.slo)))
    assert "<script" not in page.lower()
    assert "<img" not in page.lower()
    assert "onerror=alert" in page                        # the text is shown ...
    assert str(escape(SCRIPT)) in page                    # ... as text
    assert str(escape(EVIL_TARGET)) in page
    assert str(escape("upstream said " + IMG)) in page
    assert "Alerts firing now" in page and str(escape("no-divergence")) in page
    assert page.count("<svg") >= 8
    assert "http-equiv=\"Content-Security-Policy\"" in page
    assert not re.search(r"""\b(src|href)=["']?(https?:)?//""", page)   # nothing fetched from the network


@pytest.mark.emulator
def test_markdown_and_json(report_store):
    _, config, store = report_store
    report = collect(store, ReportVerdicts(config.slo))
    markdown = render_markdown(report)
    assert "## emulator / latency" in markdown
    assert "| ttft-generous | ttft\\_p50\\_ms | concurrency=1 |" in markdown
    assert "**broken**" in markdown
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code:
            assert "<script" not in line and "<img" not in line, line
    assert "```text\n" + SCRIPT + " diverged\n```" in markdown   # inert inside a code block
    firing = markdown.split("Alerts firing now:", 1)[1].split("\n\n", 2)[1]
    assert firing.startswith("- **no-divergence** (slo, critical) since ") and "&lt;script&gt;" in firing
    data = json.loads(render_json(report))
    evil = next(s for s in data["sections"] if s["target"] == EVIL_TARGET)
    assert evil["slo_summary"] == {"held": 0, "broken": 1}
    assert [(a["name"], a["severity"]) for a in evil["firing"]] == [("no-divergence", "critical")]
    assert all(not s["firing"] for s in data["sections"] if s["target"] != EVIL_TARGET)
    assert any(e["text"] == IMG for p in evil["probes"] for e in p["examples"])


@pytest.mark.emulator
def test_flagged_percentiles_are_marked_and_explained_in_every_format(report_store):
    # 6 latency requests a level: p50 has a bounded interval, p99 (needs 368) is flagged.
    _, config, store = report_store
    report = collect(store, ReportVerdicts(config.slo))
    latency = next(s for s in report.sections if (s.target, s.suite) == ("emulator", "latency"))
    by_name = {(m.name, m.labels.get("concurrency")): m for m in latency.probes[0].metrics}
    assert by_name[("ttft_p99_ms", 1)].flags == ["interval_unbounded"]
    assert by_name[("ttft_p50_ms", 1)].flags is None

    markdown = render_markdown(report)
    p99_row = next(line for line in markdown.splitlines() if line.startswith("| ttft\\_p99\\_ms | concurrency=1 |"))
    assert " (!) |" in p99_row and ".. unbounded |" in p99_row
    p50_row = next(line for line in markdown.splitlines() if line.startswith("| ttft\\_p50\\_ms | concurrency=1 |"))
    assert "(!)" not in p50_row and "unbounded" not in p50_row
    assert "(!) interval\\_unbounded: too few requests" in markdown
    assert "coverage at least 95%" in markdown

    page = render_html(report)
    assert 'title="interval_unbounded: never judged">(!)</span>' in page and ".. unbounded</td>" in page
    assert "(!) interval_unbounded: too few requests" in page and "coverage at least 95%" in page

    data = json.loads(render_json(report))
    section = next(s for s in data["sections"] if (s["target"], s["suite"]) == ("emulator", "latency"))
    flagged = {m["name"] for m in section["probes"][0]["metrics"] if m["flags"]}
    assert "ttft_p99_ms" in flagged and "ttft_p50_ms" not in flagged


@pytest.mark.unit
def test_markdown_escaping_helpers():
    assert text("a|b <i>x</i> `c` *d*\nnext") == "a\\|b &lt;i&gt;x&lt;/i&gt; \\`c\\` \\*d\\* next"
    assert code_block("x ```` y").startswith("`````text\n")


@pytest.mark.unit
def test_parse_since():
    now = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    assert parse_since("30d", now) == now - dt.timedelta(days=30)
    assert parse_since("12h", now) == now - dt.timedelta(hours=12)
    assert parse_since("2026-02-01", now) == dt.datetime(2026, 2, 1, tzinfo=dt.UTC)
    with pytest.raises(ConfigError, match="--since 'yesterday'"):
        parse_since("yesterday", now)


@pytest.mark.infra
def test_cli_report_loads_in_headlesschromium(report_store):
    tmp, _, _ = report_store
    (tmp / "prober.toml").write_text(f'[store]\nurl = "sqlite:///{tmp}/prober.db"\n')
    result = prober("report", "--out", str(tmp / "out"), cwd=tmp)
    assert result.returncode == 0, result.stderr
    index = Path(result.stdout.strip().splitlines()[-1])
    assert index == (tmp / "out" / "index.html").resolve() and index.exists()
    path = index.parent / "latest.html"
    for fmt in ("md", "json"):
        other = prober("report", "--format", fmt, "--out", str(tmp / "out"), "--since", "2d", cwd=tmp)
        assert other.returncode == 0 and other.stdout.strip().endswith(f".{fmt}"), other.stderr
    bad = prober("report", "--format", "pdf", cwd=tmp)
    assert bad.returncode == 2 and "--format 'pdf'" in bad.stderr and "Traceback" not in bad.stderr

    dom = chromium("--dump-dom", path.as_uri())
    assert dom.returncode == 0, dom.stderr
    assert "<title>prober report</title>" in dom.stdout          # no script rewrote the page
    assert "<script" not in dom.stdout.lower() and "<img" not in dom.stdout.lower()
    assert dom.stdout.count("<svg") >= 8 and dom.stdout.count('class="point"') >= 20
    assert html.escape(EVIL_TARGET, quote=False) in dom.stdout   # shown as text in the parsed page

    shot = tmp / "report.png"
    result = chromium(f"--screenshot={shot}", "--window-size=1200,2400", path.as_uri())
    assert result.returncode == 0, result.stderr
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 30_000
