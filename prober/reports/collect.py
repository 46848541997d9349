"""Read the store into a report: per target and suite, the latest run's metrics judged against the
SLO rules, every metric's values over time, each suite's own charts, and a few sample outputs.

The renderers (html, markdown, json_report) only format what is collected here. The verdicts (SLO
checks, baseline resets) come from the `Verdicts` the command layer passes in: reports render them
and import no alerting code.

A long window is summarized, not drawn point by point: the newest DETAIL_RUNS runs of each target
and suite are read row by row (every one a point of its trends), and the older runs of the window
are read as aggregates the database computes per period (a week, or longer so that a series has at
most MAX_PERIODS of them): one point per period, the mean, with min..max as its bar. So the work and
the size of a year's report stay close to a month's, and nothing outside the window is read.

Only complete runs are data: a failed, interrupted or running run's values are neither plotted nor
listed among a metric's values in the window; the trend charts mark such a run where it happened,
and its own page (prober/reports/site.py) shows what it stored.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import math
import re
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, overload

from prober.core.config import SloRule
from prober.core.durations import parse_duration
from prober.core.errors import ConfigError
from prober.core.records import SampleRow, labels_key, utcnow
from prober.reports.calibration import CALIBRATION_SUITE, Overhead, host_calibration
from prober.reports.examples import Example, pick_examples
from prober.reports.parameters import EntryParameters, entry_parameters
from prober.reports.period_summaries import PeriodRequest, period_summaries
from prober.reports.plots import MetricSeries, Plot, Point, point, suite_plots, trend_plots
from prober.reports.run_lines import provenance_lines
from prober.reports.trend_guides import AlertOnTrend, add_guides
from prober.reports.verdict_table import VerdictRow, verdict_rows
from prober.store import Store

# Runs of a target and suite read row by row and drawn one point each: two weeks of nightly runs.
DETAIL_RUNS = 14
# Older runs in the window: one point per period of whole weeks, at most this many periods.
MAX_PERIODS = 13
_WEEK = dt.timedelta(days=7)
_MONDAY = dt.datetime(1970, 1, 5, tzinfo=dt.UTC)     # periods start on a Monday, 00:00 UTC


def parse_since(text: str | None, now: dt.datetime | None = None) -> dt.datetime | None:
    """`30d`, `12h`, `2w`, `90m` before now, or an ISO date/time (UTC unless it says otherwise)."""
    if not text:
        return None
    now = now or utcnow()
    period = parse_duration(text)
    if period is not None:
        return now - period
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(f"--since {text!r}: expected a duration such as 30d, 12h, 2w or 90m, "
                          f"or a date such as 2026-01-31") from None
    return when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)


class SloJudgement(Protocol):
    """One SLO rule judged against one metric row."""

    @property
    def rule(self) -> SloRule: ...
    @property
    def metric(self) -> dict[str, Any]: ...
    @property
    def broken(self) -> bool: ...


class Verdicts(Protocol):
    """What the report shows but does not decide (prober.alerting.verdicts.ReportVerdicts)."""

    def slo_checks(self, metric_rows: Sequence[dict[str, Any]],
                   run_row: dict[str, Any]) -> Sequence[SloJudgement]: ...

    @property
    def fingerprint(self) -> str:
        """A text that changes whenever the SLO judgements of the same metric rows would."""
        ...

    def baseline_resets(self, store: Store, run: dict[str, Any], target: str) -> list[str]:
        """The "baseline reset: ..." lines of `run`'s entries on `target`."""
        ...

    # A target's state at a site (prober/reports/verdict_table.py), its names and their order
    @property
    def FAILED(self) -> str: ...
    @property
    def SLO_BROKEN(self) -> str: ...
    @property
    def DRIFTING(self) -> str: ...
    @property
    def NO_DATA(self) -> str: ...
    @property
    def HEALTHY(self) -> str: ...
    @property
    def states(self) -> Sequence[str]: ...

    def target_state(self, status: str | None, slo_broken: bool, firing_kinds: Collection[str]) -> str: ...


@dataclass
class SloResult:
    rule: str
    condition: str       # e.g. "<= 800"
    severity: str
    broken: bool


@dataclass
class LatestMetric:
    probe: str
    name: str
    labels: dict[str, Any]
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int | None
    unit: str | None
    slo: list[SloResult] = field(default_factory=list)
    # this metric's values in the newest DETAIL_RUNS runs of the window, oldest first (the latest
    # run's is the last)
    recent: list[float | None] = field(default_factory=list)
    # why the value is never judged (e.g. ["interval_unbounded"]); None when it is
    flags: list[str] | None = None
    # the client's own overhead on this host for a TTFT or ITL figure (prober/reports/calibration.py)
    overhead: Overhead | None = None


@dataclass
class RunInfo:
    id: str
    started_at: dt.datetime
    status: str

    @property
    def complete(self) -> bool:
        return self.status == "complete"


@dataclass
class FiringAlert:
    """An alert of this target and suite that is firing now (prober/alerting/alerts.py keeps the states)."""

    name: str
    kind: str            # "slo" | "drift"
    severity: str
    metric: str
    labels: dict[str, Any]
    summary: str
    fired_at: dt.datetime | None
    target: str = ""
    suite: str = ""
    # the `Section.anchor` of its target and suite in the full report; "" when it has no section
    anchor: str = ""
    # the site of the run that judged it ("" for an alert stored before sites were)
    site: str = ""
    probe: str = ""
    # what the alert stored beside its summary: an SLO's comparator and threshold, a drift's
    # baseline runs and the night it began (its trend draws them, prober/reports/trend_guides.py)
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProbeSection:
    probe: str
    metrics: list[LatestMetric]
    plots: list[Plot]
    trends: list[Plot]
    examples: list[Example]
    # metrics with a firing alert or a broken SLO: their trend panels start open, with their
    # guides; the others are drawn compact and start folded
    alerting_metrics: list[str] = field(default_factory=list)


@dataclass
class Section:
    """One target and suite, as probed from one site (the sections of one target and suite from
    several sites follow each other, in site order)."""

    target: str
    suite: str
    runs: list[RunInfo]
    latest_run: RunInfo
    probes: list[ProbeSection]
    firing: list[FiringAlert] = field(default_factory=list)
    # What the latest run measured on this target (prober/reports/run_lines.provenance_lines: its
    # prober, config, host and status; the parameters are `parameters`), and its
    # "baseline reset: ..." lines for entries that no earlier run is comparable with.
    provenance: list[str] = field(default_factory=list)
    baseline_resets: list[str] = field(default_factory=list)
    # each suite entry's parameters that differ from its probe's defaults (prober/reports/parameters.py)
    parameters: list[EntryParameters] = field(default_factory=list)
    # a stable fragment id, "<target>-<suite>" slugged, "<target>-<suite>-<site>" where the report
    # has that target and suite from more than one site (see `anchors`)
    anchor: str = ""
    site: str = ""

    @property
    def slo_results(self) -> list[tuple[LatestMetric, SloResult]]:
        return [(m, result) for p in self.probes for m in p.metrics for result in m.slo]


@dataclass
class Report:
    generated_at: dt.datetime
    since: dt.datetime | None
    target: str | None
    store_url: str
    sections: list[Section]
    # every alert firing now (of `target` when one is given): the banner on top of every page
    firing: list[FiringAlert] = field(default_factory=list)
    # the run a run page is about (collect(run_id=...)); None for the report over the window
    run: RunInfo | None = None
    # the scheduled night the report is about (`prober report --batch`): all its runs, every site
    batch: str | None = None
    # what every page opens with: one row per target and site (prober/reports/verdict_table.py)
    verdicts: list[VerdictRow] = field(default_factory=list)


def _series_key(row: dict[str, Any]) -> tuple[str, str, str]:
    key = row.get(_SERIES)
    return key if key is not None else (row["probe"], row["name"], labels_key(row.get("labels")))


# A row's series key, computed once when the window is read (labels_key serializes the labels).
_SERIES = "_series_key"


def _key_series(rows: Sequence[dict[str, Any]]) -> None:
    """Give each row its series key. Rows of one label set share their labels (the store decodes
    each text once), so a key is computed once per probe, name and label set: a section's two
    hundred series recur in each of its runs, and a key per row was a tenth of a fleet report."""
    keys: dict[tuple[str, str, int], tuple[str, str, str]] = {}
    for row in rows:
        shared = (row["probe"], row["name"], id(row["labels"]))     # (`rows` keeps every labels object alive)
        if shared not in keys:
            keys[shared] = _series_key(row)
        row[_SERIES] = keys[shared]


def _latest_run(runs: list[RunInfo]) -> RunInfo:
    """The newest complete run; the newest run of any status when none completed."""
    complete = [r for r in runs if r.status == "complete"]
    return (complete or runs)[-1]


_SLUG_UNSAFE = re.compile(r"[^a-z0-9]+")
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def slug(text: str) -> str:
    """Lower-case letters, digits and single dashes: safe in a URL fragment, an id and a file name."""
    return _SLUG_UNSAFE.sub("-", text.lower()).strip("-")


def anchors(keys: Sequence[tuple[str, ...]]) -> dict[tuple[str, ...], str]:
    """(target, suite) or (target, suite, site) -> the parts joined by dashes, slugged; two keys
    that slug alike (`a.b` and `a-b`) get -2, -3 in sorted order, so each anchor stays the same
    from one report to the next."""
    taken: dict[tuple[str, ...], str] = {}
    used: set[str] = set()
    for key in sorted(keys):
        base = slug("-".join(key)) or "section"
        anchor, n = base, 1
        while anchor in used:
            n += 1
            anchor = f"{base}-{n}"
        used.add(anchor)
        taken[key] = anchor
    return taken


def run_page_name(run_id: str) -> str:
    """The file name of a run's page: the id itself where it is a safe file name (prober's ids
    are), otherwise a hash of it (a run id in a store is text like any other)."""
    if _SAFE_NAME.fullmatch(run_id):
        return f"{run_id}.html"
    return f"run-{hashlib.sha256(run_id.encode()).hexdigest()[:16]}.html"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


@dataclass
class PeriodSummary:
    """One metric over the complete runs of one period of the window's older part."""

    start: dt.datetime
    end: dt.datetime
    at: dt.datetime               # where it is drawn: the middle of its runs
    runs: int
    row: dict[str, Any]           # probe, name, labels, unit, count, low, high, mean (Store.metric_summary)


@dataclass
class SectionHistory:
    """What one target and suite stored in the window, as probed from one site."""

    target: str
    suite: str
    site: str
    # every run of the window with metric rows of the target, oldest first
    runs: list[RunInfo]
    # the metric rows of the newest DETAIL_RUNS of them, oldest run first (with suite, run_started_at, run_status)
    rows: list[dict[str, Any]]
    # the older runs, summarized per period
    summaries: list[PeriodSummary] = field(default_factory=list)

    @functools.cached_property
    def by_probe(self) -> dict[str, tuple[list[PeriodSummary], list[dict[str, Any]]]]:
        """probe -> its summaries and its rows: a section's trends are drawn probe by probe."""
        found: dict[str, tuple[list[PeriodSummary], list[dict[str, Any]]]] = defaultdict(lambda: ([], []))
        for summary in self.summaries:
            found[summary.row["probe"]][0].append(summary)
        for row in self.rows:
            found[row["probe"]][1].append(row)
        return dict(found)

    @functools.cached_property
    def detailed_run_ids(self) -> set[str]:
        """The runs read row by row (the others' marks come from `runs`)."""
        return {row["run_id"] for row in self.rows}

    def up_to(self, run: RunInfo) -> SectionHistory:
        """The history as it was when `run` (one of its runs) was the newest."""
        kept = self.runs[:[r.id for r in self.runs].index(run.id) + 1]
        ids = {r.id for r in kept}
        return SectionHistory(self.target, self.suite, self.site, kept,
                              [row for row in self.rows if row["run_id"] in ids], self.summaries)


@dataclass
class Window:
    """The history of a report's window, read once: the report over the window and the page of
    each of its runs are all cut from it (prober/reports/site.py)."""

    since: dt.datetime | None
    target: str | None
    # (target, suite, site) -> its history
    sections: dict[tuple[str, str, str], SectionHistory]
    # store lookups that several sections and pages share: run rows, entries, calibrations
    looked_up: dict[tuple[str, str], Any] = field(default_factory=dict)

    def lookup(self, kind: str, run_id: str, read: Any) -> Any:
        key = (kind, run_id)
        if key not in self.looked_up:
            self.looked_up[key] = read(run_id)
        return self.looked_up[key]


@dataclass(frozen=True)
class _Period:
    """One period of a section's older runs: where it starts and ends, and its complete runs."""

    start: dt.datetime
    end: dt.datetime
    at: dt.datetime               # the middle of its runs
    weeks: tuple[tuple[str, ...], ...]     # its runs, week by week (what a kept summary covers)

    @property
    def runs(self) -> int:
        return sum(map(len, self.weeks))


def _periods(older: Sequence[RunInfo]) -> list[_Period]:
    """The older runs' periods: whole weeks on a Monday grid, at most MAX_PERIODS of them."""
    complete = [r for r in older if r.complete]
    if not complete:
        return []
    # (+ 2 weeks: the span meets at most span / period + 1 cells of the Monday grid, fewer than MAX_PERIODS + 1)
    weeks = (complete[-1].started_at - complete[0].started_at) / _WEEK + 2
    period = _WEEK * max(1, math.ceil(weeks / MAX_PERIODS))
    groups: dict[int, list[RunInfo]] = defaultdict(list)
    for run in complete:
        groups[(run.started_at - _MONDAY) // period].append(run)
    found = []
    for index, members in sorted(groups.items()):
        start = _MONDAY + index * period
        first, last = members[0].started_at, members[-1].started_at
        weekly: dict[int, list[str]] = defaultdict(list)
        for run in members:
            weekly[(run.started_at - _MONDAY) // _WEEK].append(run.id)
        found.append(_Period(start, start + period, first + (last - first) / 2,
                             tuple(tuple(ids) for _, ids in sorted(weekly.items()))))
    return found


def _summaries(store: Store, periods_of: dict[tuple[str, str, str], list[_Period]]
               ) -> dict[tuple[str, str, str], list[PeriodSummary]]:
    """Each section's metrics, one summary per period and metric (prober/reports/period_summaries.py:
    kept in the store once aggregated). The targets of a suite mostly ran in the same runs, so a
    period is one request for all of them."""
    targets_of: dict[_Period, list[tuple[str, str, str]]] = defaultdict(list)
    for key, periods in periods_of.items():
        for period in periods:
            targets_of[period].append(key)
    found: dict[tuple[str, str, str], list[PeriodSummary]] = {key: [] for key in periods_of}
    # (one suite and site per period: its runs are theirs)
    requests = [PeriodRequest(keys[0][1], keys[0][2], tuple(key[0] for key in keys), period.weeks)
                for period, keys in targets_of.items()]
    for (period, keys), summarized in zip(targets_of.items(), period_summaries(store, requests), strict=True):
        for key in keys:
            _key_series(summarized[key[0]])
            found[key] += [PeriodSummary(period.start, period.end, period.at, period.runs, row)
                           for row in summarized[key[0]]]
    for summaries in found.values():
        summaries.sort(key=lambda summary: summary.start)     # stable: each period's rows keep their order
    return found


# The text columns of a metric row whose values recur in every run: one object each in the window
# (a fleet's month is 120,000 rows; six copies of their texts were a fifth of a report's memory).
_REPEATED = ("probe", "name", "unit", "entry")


def _detail_runs(runs: list[RunInfo], latest_only: bool) -> list[RunInfo]:
    """The runs read row by row: the newest DETAIL_RUNS, or only those from the newest complete
    run on (the one a section judges, `_latest_run`)."""
    if not latest_only:
        return runs[-DETAIL_RUNS:]
    complete = [index for index, run in enumerate(runs) if run.complete]
    return runs[complete[-1]:] if complete else runs[-1:]


def load_window(store: Store, since: dt.datetime | None = None, target: str | None = None,
                suite: str | None = None, *, site: str | None = None, batch: str | None = None,
                latest_only: bool = False) -> Window:
    """Read the window's history (of one site's or one batch's runs where given): which runs
    stored metrics of which target, the rows of each section's newest DETAIL_RUNS runs, and the
    summaries of the older ones. A section is a target and suite as probed from one site.
    `latest_only`: the rows of each section's latest run only, no summaries (`prober status`
    judges the latest runs and draws no trend)."""
    runs_of: dict[tuple[str, str, str], list[RunInfo]] = defaultdict(list)
    for pair in store.metric_runs(since=since, target=target, suite=suite, site=site, batch=batch):
        runs_of[(pair["target"], pair["suite"], pair["run_site"] or "")].append(
            RunInfo(pair["run_id"], pair["run_started_at"], pair["run_status"]))
    sections = {}
    texts: dict[str | None, str | None] = {}
    for (target_name, suite_name, site_name), runs in runs_of.items():
        order = {run.id: (i, run) for i, run in enumerate(_detail_runs(runs, latest_only))}
        rows = store.metrics_of_runs(list(order), target_name, shared_json=True)
        for row in rows:
            run = order[row["run_id"]][1]
            row.update(run_id=run.id, target=target_name, suite=suite_name, run_started_at=run.started_at,
                       run_status=run.status, run_site=site_name)
            for column in _REPEATED:     # (the driver gives each row its own copy of each text)
                text = row[column]
                row[column] = texts.setdefault(text, text)
        _key_series(rows)
        rows.sort(key=lambda row: order[row["run_id"]][0])      # stable: each run's rows keep their order
        sections[(target_name, suite_name, site_name)] = SectionHistory(target_name, suite_name, site_name, runs, rows)
    summaries = _summaries(store, {key: [] if latest_only else _periods(history.runs[:-DETAIL_RUNS])
                                   for key, history in sections.items()})
    for key, history in sections.items():
        history.summaries = summaries[key]
    return Window(since, target, sections)


def _period_note(summary: PeriodSummary) -> str:
    return _period_text(summary.start, summary.end, summary.row["count"])


@functools.lru_cache(maxsize=1024)
def _period_text(start: dt.datetime, end: dt.datetime, count: int) -> str:
    """(a year's trends carry some sixty thousand period points, on a few dozen distinct notes)"""
    return f"{start:%Y-%m-%d} to {end - dt.timedelta(days=1):%Y-%m-%d}: mean of {count} run(s), bar min..max"


def _history(history: SectionHistory, probe: str, periods: bool = True) -> list[MetricSeries]:
    """Each metric of `probe`: its values per complete run, after one point per period of the
    older runs (unless not `periods`); other runs are remembered as marks, not points."""
    series: dict[tuple[str, str, str], MetricSeries] = {}

    def of(row: dict[str, Any]) -> MetricSeries:
        key = _series_key(row)
        if key not in series:
            series[key] = MetricSeries(row["probe"], row["name"], row.get("labels") or {}, row.get("unit"))
        return series[key]

    summaries, rows = history.by_probe.get(probe, ([], []))
    for summary in summaries if periods else []:
        row = summary.row
        if _is_number(row.get("mean")):
            of(row).points.append(Point(summary.at, row["mean"], row["low"], row["high"], note=_period_note(summary)))
    for row in rows:
        if row["run_status"] != "complete":
            of(row).marks.append((row["run_started_at"], f"run {row['run_id']} {row['run_status']}: not plotted"))
        elif _is_number(row.get("value")):
            of(row).points.append(point(row["run_started_at"], row, note=f"run {row['run_id']}"))
    detailed = history.detailed_run_ids
    older_marks = [(run.started_at, f"run {run.id} {run.status}: not plotted") for run in history.runs
                   if not run.complete and run.id not in detailed]
    for found in series.values():
        found.marks[:0] = older_marks
    return list(series.values())


class _LazyHistory(Sequence[MetricSeries]):
    """A section's series of one probe, built when a chart first asks for them: most probes
    declare no trend chart, and a run's page draws no trend of its own."""

    def __init__(self, build: Callable[[], list[MetricSeries]]) -> None:
        self._build: Callable[[], list[MetricSeries]] | None = build
        self._series: list[MetricSeries] = []

    def _built(self) -> list[MetricSeries]:
        if self._build is not None:
            self._series, self._build = self._build(), None
        return self._series

    @overload
    def __getitem__(self, index: int) -> MetricSeries: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[MetricSeries]: ...

    def __getitem__(self, index: int | slice) -> MetricSeries | Sequence[MetricSeries]:
        return self._built()[index]

    def __len__(self) -> int:
        return len(self._built())

    def __iter__(self) -> Iterator[MetricSeries]:
        # (Sequence's own __iter__ indexes item by item: a third of a fleet report's charting)
        return iter(self._built())


def _provenance(store: Store, window: Window, run_id: str, target: str, verdicts: Verdicts,
                page: bool) -> tuple[list[str], list[str], list[EntryParameters]]:
    """The provenance lines of `run_id` on `target`, its baseline resets, which only the report over
    the window shows (they read the runs before it, and a run's page is one of many), and its
    entries' parameters that differ from their probes' defaults."""
    found = window.lookup("run", run_id, store.get_run)
    assert found is not None                       # the report found this run in the store
    run = dict(found)
    run["target_status"] = {t: s for t, s in (run.get("target_status") or {}).items() if t == target}
    run["targets"] = [target]
    resets = [] if page else verdicts.baseline_resets(store, found, target)
    entries = window.lookup("entries", run_id, store.run_entries)
    return provenance_lines(run, []), resets, entry_parameters(entries, target)


def _samples_by_target(store: Store, run_id: str) -> dict[str, list[SampleRow]]:
    """A run's samples per target, read at once: a fleet's sections share their latest runs."""
    found: dict[str, list[SampleRow]] = defaultdict(list)
    for row in store.samples(run_id, shared_json=True):
        found[row["target"]].append(row)
    return found


def _section(store: Store, verdicts: Verdicts, window: Window, history: SectionHistory,
             firing: list[FiringAlert], latest_id: str | None = None, examples: bool = True) -> Section:
    target, suite, runs, rows = history.target, history.suite, history.runs, history.rows
    latest = next(r for r in runs if r.id == latest_id) if latest_id else _latest_run(runs)
    latest_rows = [row for row in rows if row["run_id"] == latest.id]
    checks = defaultdict(list)
    # what the open trends draw: the alerts firing now, and the rules the latest run broke
    on_trends = [AlertOnTrend(a.name, a.kind, a.probe, a.metric, a.labels, a.fired_at, a.detail) for a in firing]
    for check in verdicts.slo_checks(latest_rows, {"id": latest.id, "suite": suite}):
        condition = f"{check.rule.comparator} {check.rule.threshold:g}"
        checks[check.metric["id"]].append(SloResult(check.rule.name, condition, check.rule.severity, check.broken))
        if check.broken:
            on_trends.append(AlertOnTrend(check.rule.name, "slo", check.metric["probe"], check.metric["name"],
                                          check.metric.get("labels") or {}, None,
                                          {"comparator": check.rule.comparator, "threshold": check.rule.threshold}))
    # the values the trends plot run by run, so that the table and the charts agree
    recent: dict[tuple[str, str, str], list[float | None]] = defaultdict(list)
    for row in rows:
        if row["run_status"] == "complete":
            recent[_series_key(row)].append(row.get("value"))
    page = latest_id is not None
    # sample outputs: the report's, from each section's latest run (a run's page reads no samples)
    picked = [] if page or not examples else pick_examples(
        window.lookup("samples", latest.id, lambda run_id: _samples_by_target(store, run_id)).get(target, []))
    calibration = window.lookup("calibration", latest.id, lambda run_id: host_calibration(
        store, run_id, window.lookup("run", run_id, store.get_run)))
    probes = []
    for probe in dict.fromkeys(row["probe"] for row in latest_rows):
        probe_rows = [row for row in latest_rows if row["probe"] == probe]
        # (a run's page: the runs up to it, no periods; its trend charts are few, from declared charts)
        probe_history = _LazyHistory(lambda probe=probe: _history(history, probe, periods=not page))  # type: ignore[misc]
        # a run's page shows what it stored; the trends are the report's (latest.html)
        trends = [] if page else trend_plots(probe_history)
        alerting = []
        for plot in trends:
            if add_guides(plot, probe, probe_history, on_trends):
                alerting.append(plot.title)
            else:
                plot.compact = True
        probes.append(ProbeSection(
            probe=probe,
            metrics=[LatestMetric(probe, row["name"], row.get("labels") or {}, row.get("value"), row.get("ci_low"),
                                  row.get("ci_high"), row.get("n"), row.get("unit"), checks.get(row["id"], []),
                                  recent[_series_key(row)], row.get("flags") or None,
                                  calibration.for_figure(row["name"], row.get("labels") or {}) if calibration
                                  else None) for row in probe_rows],
            plots=suite_plots(probe, probe_rows, probe_history),
            trends=trends,
            examples=[e for e in picked if e.probe == probe],
            alerting_metrics=alerting))
    provenance, resets, parameters = _provenance(store, window, latest.id, target, verdicts, page)
    return Section(target=target, suite=suite, runs=runs, latest_run=latest, probes=probes, firing=firing,
                   provenance=provenance, baseline_resets=resets, parameters=parameters)


def _anchor_keys(keys: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str, str], tuple[str, ...]]:
    """(target, suite, site) -> what its anchor is made of: (target, suite) while the report has
    that target and suite from one site only, so that a single-site store keeps its anchors."""
    sites: dict[tuple[str, str], int] = defaultdict(int)
    for target, suite, _ in keys:
        sites[(target, suite)] += 1
    return {key: key if sites[key[:2]] > 1 else key[:2] for key in keys}


def collect(store: Store, verdicts: Verdicts, since: dt.datetime | None = None,
            target: str | None = None, run_id: str | None = None, window: Window | None = None,
            batch: str | None = None, expected: Sequence[str] = (), examples: bool = True) -> Report:
    """The report over the runs started since `since` (all runs when None), for one target or all,
    a section per target, suite and site; with `batch`, over that batch's runs only.

    With `run_id`, the page of that run: a section per target it stored metrics for, with that run
    as the latest and the history up to it (ConfigError when there is no such run). `window` is
    the window's history when it was read already (load_window with the same since and target).

    The report over the window opens with its verdict table (`Report.verdicts`), a row per target
    and site, `expected` (the configured targets) among them with no data where they have no run;
    a run's page gets none (prober/reports/site.py gives it the report's). `examples`: False
    leaves the sample outputs out (`prober status` shows only the verdicts)."""
    run: RunInfo | None = None
    suite: str | None = None
    site: str | None = None
    if run_id is not None:
        found = store.get_run(run_id)
        if found is None:
            raise ConfigError(f"no run with id {run_id!r}")
        run, suite, site = RunInfo(found["id"], found["started_at"], found["status"]), found["suite"], found["site"]
    if window is None:
        window = load_window(store, since, target, suite, site=site, batch=batch)
    histories = dict(window.sections)
    if run is not None:
        histories = {key: history.up_to(run) for key, history in histories.items()
                     if key[1:] == (suite, site or "") and any(r.id == run.id for r in history.runs)}
    anchor_keys = _anchor_keys(list(histories))
    names = anchors(list(anchor_keys.values()))
    firing: dict[tuple[str, str, str], list[FiringAlert]] = defaultdict(list)
    every_firing = []
    for alert in store.alerts(state="firing"):
        if target is not None and alert["target"] != target:
            continue
        alert_site = (alert.get("detail") or {}).get("site") or ""
        # an alert stored before sites were belongs to its target and suite from every site
        keys = [key for key in histories if key[:2] == (alert["target"], alert["suite"])
                and alert_site in ("", key[2])]
        shown = FiringAlert(alert["name"], alert["kind"], alert["severity"], alert["metric"],
                            alert.get("labels") or {}, alert["summary"], alert.get("fired_at"),
                            target=alert["target"], suite=alert["suite"],
                            anchor=names[anchor_keys[keys[0]]] if keys else "", site=alert_site,
                            probe=alert.get("probe") or "", detail=alert.get("detail") or {})
        for key in keys:
            firing[key].append(shown)
        every_firing.append(shown)
    sections = []
    # the calibration of the client comes last: it qualifies the latency figures, it is no verdict
    for key, history in sorted(histories.items(), key=lambda item: (item[0][1] == CALIBRATION_SUITE, item[0])):
        # (a run's page is kept once drawn, prober/reports/site.py: what fires now is only in its
        # banner on top, which every report redraws)
        section = _section(store, verdicts, window, history, firing[key] if run is None else [],
                           latest_id=run.id if run is not None else None, examples=examples)
        section.site, section.anchor = key[2], names[anchor_keys[key]]
        sections.append(section)
    # (the latest runs' samples gave the examples; the run pages cut from the same window read none,
    # and a fleet's two latest runs are some 20 MB of them)
    for looked in [looked for looked in window.looked_up if looked[0] == "samples"]:
        del window.looked_up[looked]
    report = Report(generated_at=utcnow(), since=since, target=target, store_url=store.url, sections=sections,
                    firing=every_firing, run=run, batch=batch)
    if run is None:
        report.verdicts = verdict_rows(store, verdicts, report, expected)
    return report
