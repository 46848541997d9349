"""`prober report --out DIR` as a site to serve: DIR/index.html (runs by date, per target, with their
status and the alerts firing now), DIR/latest.html (the report over the window) and
DIR/runs/<run>.html (a page for each of the newest runs, RUN_PAGES per suite and site (a week of
each site's nightly runs); older runs are listed without one). Every page carries the banner of firing alerts, and each
target and suite has a stable anchor (`latest.html#<target>-<suite>`, prober/reports/collect.anchors).

Each file is written aside and renamed into place, so that a web server never serves half a page;
every page is rewritten each time, because the banner is about now, and the page of a run that left
the window is removed (DIR/runs/ holds the site's pages only).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prober.reports.collect import FiringAlert, Report, Verdicts, Window, collect, load_window, run_page_name
from prober.reports.html import render_html, render_index
from prober.reports.run_lines import target_states
from prober.store import Store

# Runs listed in the index, newest first: a month of nightly suites and more.
MAX_RUNS = 1000
# Runs of each suite from each site given a page, newest first: each page is read and drawn anew
# every time (its banner is about now), so their number must not grow with the window. Counted per
# site: a fleet probed from two sites runs each suite twice a night, and a count across sites gave
# each site half a week.
RUN_PAGES = 7


@dataclass
class IndexRun:
    """One run as one target saw it."""

    id: str
    suite: str
    started_at: dt.datetime
    status: str              # the target's own status in the run
    reason: str
    page: str                # "" for a run too old to have a page
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


def site_index(report: Report, runs: list[dict[str, Any]], paged: set[str] | None = None) -> SiteIndex:
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
            page = run_page_name(run["id"]) if paged is None or run["id"] in paged else ""
            index.targets.setdefault(target, []).append(IndexRun(run["id"], run["suite"], run["started_at"], status,
                                                                 reason, page, firing, site))
    index.targets = dict(sorted(index.targets.items()))
    return index


def _write(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def paged_runs(report: Report, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs (newest first) that get a page: the newest RUN_PAGES of each suite from each site,
    and the latest run of each section of the report, which links to its page."""
    latest = {section.latest_run.id for section in report.sections}
    counted: dict[tuple[str, str], int] = {}
    paged = []
    for run in runs:
        key = (run["suite"], run.get("site") or "")
        counted[key] = counted.get(key, 0) + 1
        if counted[key] <= RUN_PAGES or run["id"] in latest:
            paged.append(run)
    return paged


def write_site(store: Store, verdicts: Verdicts, report: Report, out_dir: Path, window: Window | None = None) -> Path:
    """Write (or rewrite) the site of `report` (collected over the window, whose history is
    `window` when it was read already) into out_dir, with a page for each of the window's newest
    runs; the path of its index.html."""
    since, target, batch = report.since, report.target, report.batch
    runs = store.list_runs(limit=MAX_RUNS, target=target, batch=batch, since=since, counts=False)
    window = window or load_window(store, since, target, batch=batch)
    pages = out_dir / "runs"
    pages.mkdir(parents=True, exist_ok=True)
    written = set()
    paged = paged_runs(report, runs)
    for run in paged:
        page = collect(store, verdicts, since, target, run_id=run["id"], window=window, batch=batch)
        page.firing = report.firing      # the banner links to the full report's anchors
        page.verdicts = report.verdicts  # every page opens with the verdict of now
        written.add(run_page_name(run["id"]))
        _write(pages / run_page_name(run["id"]), render_html(page, root="../"))
    for stale in pages.glob("*.html"):   # runs that left the window or the newest: the index no longer links them
        if stale.name not in written:
            stale.unlink()
    _write(out_dir / "latest.html", render_html(report))
    index = out_dir / "index.html"
    _write(index, render_index(site_index(report, runs, {run["id"] for run in paged}), report.firing,
                                    report.verdicts))
    return index.resolve()
