"""`prober report --out DIR` as a site to serve: DIR/index.html (runs by date, per target, with their
status and the alerts firing now), DIR/latest.html (the report over the window) and
DIR/runs/<run>.html (one page per run). Every page carries the banner of firing alerts, and each
target and suite has a stable anchor (`latest.html#<target>-<suite>`, reports/collect.anchors).

Each file is written aside and renamed into place, so that a web server never serves half a page;
every page is rewritten each time, because the banner is about now, and the page of a run that left
the window is removed (DIR/runs/ holds the site's pages only).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reports.collect import FiringAlert, Report, Verdicts, collect, run_page_name
from reports.html import render_html, render_index
from reports.run_lines import target_states
from store import Store

# Runs listed (and given a page) in the index, newest first: a month of nightly suites and more.
MAX_RUNS = 1000


@dataclass
class IndexRun:
    """One run as one target saw it."""

    id: str
    suite: str
    started_at: dt.datetime
    status: str              # the target's own status in the run
    reason: str
    page: str
    firing: list[FiringAlert]
    site: str = ""


@dataclass
class SiteIndex:
    generated_at: dt.datetime
    since: dt.datetime | None
    store_url: str
    # target -> its runs, newest first
    targets: dict[str, list[IndexRun]] = field(default_factory=dict)
    batch: str | None = None


def site_index(report: Report, runs: list[dict[str, Any]]) -> SiteIndex:
    index = SiteIndex(report.generated_at, report.since, report.store_url, batch=report.batch)
    shown: set[tuple[str, str, str]] = set()   # an alert firing now is shown on the newest run it judges
    for run in runs:
        for target, (status, reason) in target_states(run).items():
            if report.target is not None and target != report.target:
                continue
            site = run.get("site") or ""
            firing = [a for a in report.firing if (a.target, a.suite) == (target, run["suite"])
                      and a.site in ("", site) and (target, run["suite"], site) not in shown]
            shown.add((target, run["suite"], site))
            index.targets.setdefault(target, []).append(IndexRun(run["id"], run["suite"], run["started_at"], status,
                                                                 reason, run_page_name(run["id"]), firing, site))
    index.targets = dict(sorted(index.targets.items()))
    return index


def _write(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def write_site(store: Store, verdicts: Verdicts, report: Report, out_dir: Path) -> Path:
    """Write (or rewrite) the site of `report` (collected over the window) into out_dir, with a
    page for each run in its window; the path of its index.html."""
    since, target, batch = report.since, report.target, report.batch
    runs = store.list_runs(limit=MAX_RUNS, target=target, batch=batch, since=since)
    pages = out_dir / "runs"
    pages.mkdir(parents=True, exist_ok=True)
    written = set()
    for run in runs:
        page = collect(store, verdicts, since, target, run_id=run["id"], batch=batch)
        page.firing = report.firing      # the banner links to the full report's anchors
        written.add(run_page_name(run["id"]))
        _write(pages / run_page_name(run["id"]), render_html(page, root="../"))
    for stale in pages.glob("*.html"):   # runs that left the window: the index no longer links them
        if stale.name not in written:
            stale.unlink()
    _write(out_dir / "latest.html", render_html(report))
    index = out_dir / "index.html"
    _write(index, render_index(site_index(report, runs), report.firing))
    return index.resolve()
