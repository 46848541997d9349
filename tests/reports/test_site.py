"""`prober report --out DIR` as a site: index.html, latest.html and a page per run, the firing-alert
banner on every page, stable anchors, failed runs marked and not plotted; rendered in headless
Chromium with screenshots kept as CI artifacts."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from markupsafe import escape

from prober.alerting.verdicts import ReportVerdicts
from prober.reports.collect import anchors, collect, run_page_name, slug
from prober.reports.markdown import render_markdown
from tests.support.chromium import chromium
from tests.support.cli import prober
from tests.support.report_store import EVIL_TARGET, FAILED_RUN, write_cli_config

# Where the screenshots go: CI keeps this directory as its artifacts (.ci/run prints its path).
SCREENSHOTS = Path(os.environ.get("PROBER_CI_ARTIFACTS", Path(__file__).parents[2] / "ci-artifacts")) \
    / "report-screenshots"
# The README's screenshot, rewritten only when asked (PROBER_README_SCREENSHOT=1): the page without
# alerts, whose one target is the emulator; tests/test_readme.py checks the committed file.
README_SCREENSHOT = Path(__file__).parents[2] / "docs" / "report-screenshot.png"


@pytest.fixture(scope="module")
def site(report_store):
    tmp, config, store = report_store
    write_cli_config(tmp, config)
    (tmp / "site" / "runs").mkdir(parents=True)
    (tmp / "site" / "runs" / "left-the-window.html").write_text("an old run's page")
    result = prober("report", "--out", str(tmp / "site"), cwd=tmp)
    assert result.returncode == 0, result.stderr
    index = Path(result.stdout.strip().splitlines()[-1])
    return tmp, store, index


def _pages(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): path.read_text() for path in sorted(root.rglob("*.html"))}


@pytest.mark.emulator
def test_site_has_index_latest_and_a_page_per_run(site):
    tmp, store, index = site
    root = index.parent
    assert index == (tmp / "site" / "index.html").resolve()
    pages = _pages(root)
    runs = store.list_runs(limit=100)
    # (the page of a run that left the window is gone)
    assert set(pages) == {"index.html", "latest.html"} | {f"runs/{run_page_name(r['id'])}" for r in runs}
    assert not list(root.rglob(".*.partial"))

    # every page: the banner of the alert firing now, on top, and nothing live from the endpoint
    for name, page in pages.items():
        body = page.split("<body>", 1)[1]
        assert body.index('id="firing-alerts"') < body.index("<h1>"), name
        banner = body.split('id="firing-alerts"', 1)[1].split("</div>", 1)[0]
        assert "1 alert(s) firing now" in banner and "<strong>no-divergence</strong> (slo, critical)" in banner
        assert f'latest.html#{slug(EVIL_TARGET + "-nightly")}"' in banner, name
        assert "<script" not in page.lower() and "<img" not in page.lower(), name
        assert str(escape(EVIL_TARGET)) in page or name.startswith("runs/"), name

    # stable anchors, one per target and suite, linked from the table of contents
    latest = pages["latest.html"]
    ids = re.findall(r'<section id="([^"]+)">', latest)
    assert ids == ["emulator-caching", "emulator-divergence", "emulator-latency", "emulator-openai-penalty",
                   "emulator-openai-schema-order", "evil-img-src-x-onerror-alert-3-nightly"]
    assert all(f'<a href="#{anchor}">' in latest for anchor in ids)

    # the index: runs by date per target, each with its status and link; the failed night marked
    index_page = pages["index.html"]
    evil = index_page.split(f"<h2>{escape(EVIL_TARGET)}</h2>", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r'<tr class="([\w-]+)"><td>[^<]+</td><td>nightly</td>\s*<td><a href="runs/(\w+)\.html">', evil)
    assert rows == [("not-complete", FAILED_RUN), ("complete", "hostile1"), ("complete", "hostile2"),
                    ("complete", "hostile3")]
    assert 'class="status-failed">failed</td>' in evil
    # the alert fires now: shown once, on the newest run of its suite
    assert evil.count("no-divergence (critical)") == 1
    assert "<h2>emulator</h2>" in index_page and "<h2>emulator-openai</h2>" in index_page


@pytest.mark.emulator
def test_failed_run_is_marked_not_plotted_and_tables_agree(site, report_store):
    _, config, store = report_store
    report = collect(store, ReportVerdicts(config.slo))
    evil = next(s for s in report.sections if s.target == EVIL_TARGET)
    assert evil.latest_run.id == "hostile1"                      # the newest complete run
    assert [r.status for r in evil.runs] == ["complete", "complete", "complete", "failed"]
    divergence = evil.probes[0]
    trend = next(p for p in divergence.trends if p.title == "divergence_rate")
    plotted = sorted({p.y for s in trend.series for p in s.points})
    assert 0.9 not in plotted and plotted == [0.05, 0.1, 0.5]
    assert [why for _, why in trend.marks] == [f"run {FAILED_RUN} failed: not plotted"]
    # the table's values in the window are the plotted ones
    for metric in divergence.metrics:
        assert metric.recent == [0.05, 0.1, 0.5]
    # its trend panel is open (the alert fires on it); a metric without alerts starts closed
    assert divergence.alerting_metrics == ["divergence_rate"]
    _, _, index = site
    latest = (index.parent / "latest.html").read_text()
    section = latest.split('<section id="evil-img-src-x-onerror-alert-3-nightly">', 1)[1]
    assert '<details class="trend" open>\n<summary>divergence_rate (alerting)</summary>' in section
    assert '<details class="trend">\n<summary>accuracy</summary>' in section
    assert section.count('class="run-mark"') == 1 and f"run {FAILED_RUN} failed: not plotted" in section
    assert "run not complete (failed, interrupted or running): not plotted" in section    # its legend
    markdown = render_markdown(report)
    assert f"4 run(s) in the window, 1 not complete and left out of the values: {FAILED_RUN} (failed)." in markdown
    evil_rows = [line for line in markdown.split(" / nightly", 1)[1].splitlines()
                 if line.startswith("| divergence\\_rate |")]
    assert len(evil_rows) == 3 and all(row.endswith("| 0.05 -> 0.1 -> 0.5 |") for row in evil_rows)

    # the failed run's own page shows what it stored, and says it is not plotted
    page = (index.parent / "runs" / f"{FAILED_RUN}.html").read_text()
    assert f"<h1>prober run {FAILED_RUN}</h1>" in page and "its values are shown here but not plotted" in page
    assert re.search(r"<td>divergence_rate</td><td>[^<]*concurrency=16[^<]*</td><td class=\"num\">0\.9</td>", page)
    # a complete run's page shows the history up to it: the first night has one run in its window
    first = (index.parent / "runs" / "hostile3.html").read_text()
    assert "This run <a href=\"../runs/hostile3.html\">hostile3</a>" in first and "1 run(s) in the window" in first


@pytest.mark.unit
def test_anchors_are_slugged_unique_and_stable():
    keys = [("a.b", "x"), ("a-b", "x"), ("A B", "x"), ('"><script>', "s"), ("", "")]
    first = anchors(keys)
    assert first == anchors(list(reversed(keys)))                  # the same whatever the order
    assert first[("A B", "x")] == "a-b-x" and first[("a-b", "x")] == "a-b-x-2" and first[("a.b", "x")] == "a-b-x-3"
    assert first[('"><script>', "s")] == "script-s" and first[("", "")] == "section"
    assert all(re.fullmatch(r"[a-z0-9-]+", anchor) for anchor in first.values())


@pytest.mark.unit
def test_run_page_names_are_safe_file_names():
    assert run_page_name("3f2a9c0d1e2b") == "3f2a9c0d1e2b.html"
    for hostile in ("../../etc/passwd", "a/b", "<x>", ".hidden", "x" * 100):
        name = run_page_name(hostile)
        assert re.fullmatch(r"run-[0-9a-f]{16}\.html", name), name
    assert run_page_name("a/b") != run_page_name("a\\b")


@pytest.mark.infra
def test_site_renders_in_chromium_with_screenshots(site, report_store):
    tmp, _, index = site
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    pages = {"index": index, "latest": index.parent / "latest.html",
             "run-failed": index.parent / "runs" / f"{FAILED_RUN}.html",
             "run-latency": next(p for p in (index.parent / "runs").glob("*.html")
                                 if "emulator / latency" in p.read_text())}
    for name, path in pages.items():
        dom = chromium("--dump-dom", path.as_uri())
        assert dom.returncode == 0, dom.stderr
        body = dom.stdout.split("<body>", 1)[1]
        # the verdict table is the first thing after the navigation, on every page, then the banner
        # (the markers of the part redrawn on every report, prober/reports/site.py, are comments)
        opening = re.match(r'\s*<nav class="site">.*?</nav>\s*(?:<!--[^>]*-->\s*)?'
                           r'<table class="verdicts" id="verdicts">(.*?)</table>'
                           r'\s*<div class="banner" id="firing-alerts" role="alert">', body, re.S)
        assert opening is not None, name
        states = re.findall(r'<td class="state">([^<]+)</td>', opening.group(1))
        assert states and set(states) <= {"healthy", "SLO broken", "drifting", "failed", "no data"}, (name, states)
        assert "healthy" in states and states != ["healthy"] * len(states), (name, states)
        assert "<script" not in dom.stdout.lower() and "<img" not in dom.stdout.lower(), name
        shot = SCREENSHOTS / f"{name}.png"
        result = chromium(f"--screenshot={shot}", "--window-size=1200,1600", path.as_uri())
        assert result.returncode == 0, result.stderr
        assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 20_000, name
    latest_dom = chromium("--dump-dom", pages["latest"].as_uri()).stdout
    assert latest_dom.count("<svg") >= 8 and 'id="emulator-latency"' in latest_dom

    # a site of a target with no alert firing has no banner
    quiet = prober("report", "--out", str(tmp / "quiet"), "--target", "emulator", cwd=tmp)
    assert quiet.returncode == 0, quiet.stderr
    dom = chromium("--dump-dom", (tmp / "quiet" / "latest.html").as_uri())
    assert dom.returncode == 0 and "firing-alerts" not in dom.stdout and 'id="emulator-latency"' in dom.stdout
    result = chromium(f"--screenshot={SCREENSHOTS / 'latest-no-alerts.png'}", "--window-size=1200,1600",
                      (tmp / "quiet" / "latest.html").as_uri())
    assert result.returncode == 0, result.stderr
    if os.environ.get("PROBER_README_SCREENSHOT") == "1":
        result = chromium(f"--screenshot={README_SCREENSHOT}", "--window-size=1200,1500",
                          (tmp / "quiet" / "latest.html").as_uri())
        assert result.returncode == 0, result.stderr
        assert README_SCREENSHOT.read_bytes().startswith(b"\x89PNG") and README_SCREENSHOT.stat().st_size > 30_000
