"""`prober report --out DIR` as a site to serve: DIR/index.html (runs by date, per target, with their
status and the alerts firing now), DIR/latest.html (the report over the window) and
DIR/runs/<run>.html (a page for each of the newest runs, RUN_PAGES per suite and site (a week of
each site's nightly runs); older runs are listed without one). Every page carries the banner of firing alerts, and each
target and suite has a stable anchor (`latest.html#<target>-<suite>`, prober/reports/collect.anchors).

Each file is written aside and renamed into place, so that a web server never serves half a page;
the page of a run that left the window is removed (DIR/runs/ holds the site's pages only). The index
and latest.html are drawn anew each time. A run's page is drawn once: it keeps what it was drawn
from (`page_key`: the run and its targets' statuses, the SLO rules, the window's length, prober's
report code) and while that holds, a later report redraws only its part about now, the verdict
table and the banner of firing alerts (templates/now.html.j2, between markers no stored text can
forge, since every stored text is escaped). A fleet's nightly report then draws the night's new
pages, not a week of them.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prober.reports.collect import FiringAlert, Report, Verdicts, Window, collect, load_window, run_page_name
from prober.reports.html import html_pieces, render_html, render_index, render_now
from prober.reports.run_lines import target_states
from prober.reports.verdict_table import VerdictRow
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


def _write(path: Path, text: str | Iterable[str]) -> None:
    """Write the page (its text, or its pieces as they come) beside `path`, then move it there: a
    reader never sees half a page."""
    partial = path.with_name(f".{path.name}.partial")
    with partial.open("w", encoding="utf-8") as out:
        if isinstance(text, str):
            out.write(text)
        else:
            out.writelines(text)
    partial.replace(path)


# The part of a page about now lies between these (templates/base.html.j2); what a page was drawn
# from is in its head.
NOW_START, NOW_END = "<!--prober:now-->", "<!--prober:/now-->"
_PAGE_KEY = re.compile(r'<meta name="prober-page" content="([0-9a-f]{64})">')
_HEAD_BYTES = 4096


@functools.cache
def _report_code() -> str:
    """A digest of the code that draws a page (this package's modules and templates): a page
    drawn by another version of it is drawn again."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.rglob("*")):
        if path.suffix in (".py", ".j2"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def page_key(run: dict[str, Any], report: Report, verdicts: Verdicts) -> str:
    """What the page of `run` is drawn from, as a digest: the run, its targets' statuses, the SLO
    rules, the report's target, batch and window length in days, and the code that draws it."""
    window_days = None if report.since is None else round((report.generated_at - report.since) / dt.timedelta(days=1))
    what = [run["id"], run["status"], run.get("target_status"), verdicts.fingerprint, report.target,
            report.batch, window_days, _report_code()]
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def _kept_page(path: Path, key: str) -> str | None:
    """The page at `path` when it was drawn from `key` and has its part about now, else None."""
    try:
        with path.open(encoding="utf-8") as file:
            head = file.read(_HEAD_BYTES)
            found = _PAGE_KEY.search(head)
            if found is None or found.group(1) != key:
                return None
            text = head + file.read()
    except (OSError, UnicodeDecodeError):
        return None
    return text if NOW_START in text and NOW_END in text else None


def with_now(page: str, firing: Sequence[FiringAlert], verdicts: Sequence[VerdictRow], root: str) -> str:
    """`page` with its part about now drawn anew."""
    head, rest = page.split(NOW_START, 1)
    _, tail = rest.split(NOW_END, 1)
    # (base.html.j2 puts a line break after the start marker; the include's own ends at the end marker)
    return f"{head}{NOW_START}\n{render_now(firing, verdicts, root)}{NOW_END}{tail}"


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
        path, key = pages / run_page_name(run["id"]), page_key(run, report, verdicts)
        kept = _kept_page(path, key)
        written.add(path.name)
        if kept is not None:
            # the banner links to the full report's anchors; every page opens with the verdict of now
            _write(path, with_now(kept, report.firing, report.verdicts, root="../"))
            continue
        page = collect(store, verdicts, since, target, run_id=run["id"], window=window, batch=batch)
        page.firing, page.verdicts = report.firing, report.verdicts
        _write(path, render_html(page, root="../", page_key=key))
    for stale in pages.glob("*.html"):   # runs that left the window or the newest: the index no longer links them
        if stale.name not in written:
            stale.unlink()
    _write(out_dir / "latest.html", html_pieces(report))
    index = out_dir / "index.html"
    _write(index, render_index(site_index(report, runs, {run["id"] for run in paged}), report.firing,
                                    report.verdicts))
    return index.resolve()
