"""Read the store into a report: per target and suite, the latest run's metrics judged against the
SLO rules, every metric's values over time, each suite's own charts, and a few sample outputs.

The renderers (html, markdown, json_report) only format what is collected here. The verdicts (SLO
checks, baseline resets) come from the `Verdicts` the command layer passes in: reports render them
and import no alerting code.

Only complete runs are data: a failed, interrupted or running run's values are neither plotted nor
listed among a metric's values in the window; the trend charts mark such a run where it happened,
and its own page (reports/site.py) shows what it stored.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from prober.core.config import SloRule
from prober.core.durations import parse_duration
from prober.core.errors import ConfigError
from prober.core.records import labels_key, utcnow
from reports.calibration import Overhead, host_calibration
from reports.examples import Example, pick_examples
from reports.plots import MetricSeries, Plot, point, suite_plots, trend_plots
from reports.run_lines import provenance_lines
from store import Store


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

    def baseline_resets(self, store: Store, run: dict[str, Any], target: str) -> list[str]:
        """The "baseline reset: ..." lines of `run`'s entries on `target`."""
        ...


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
    # this metric's values in the window, oldest first (the latest run's is the last)
    recent: list[float | None] = field(default_factory=list)
    # why the value is never judged (e.g. ["interval_unbounded"]); None when it is
    flags: list[str] | None = None
    # the client's own overhead on this host for a TTFT or ITL figure (reports/calibration.py)
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


@dataclass
class ProbeSection:
    probe: str
    metrics: list[LatestMetric]
    plots: list[Plot]
    trends: list[Plot]
    examples: list[Example]
    # metrics with a firing alert or a broken SLO: their trend panels start open
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
    # What the latest run measured on this target (reports/run_lines.provenance_lines), and its
    # "baseline reset: ..." lines for entries that no earlier run is comparable with.
    provenance: list[str] = field(default_factory=list)
    baseline_resets: list[str] = field(default_factory=list)
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


def _series_key(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["probe"], row["name"], labels_key(row.get("labels"))


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


def _history(rows: Sequence[dict[str, Any]]) -> list[MetricSeries]:
    """Each metric's values per complete run; other runs are remembered as marks, not points."""
    series: dict[tuple[str, str, str], MetricSeries] = {}
    for row in rows:
        key = _series_key(row)
        if key not in series:
            series[key] = MetricSeries(row["probe"], row["name"], row.get("labels") or {}, row.get("unit"))
        if row["run_status"] != "complete":
            series[key].marks.append((row["run_started_at"], f"run {row['run_id']} {row['run_status']}: not plotted"))
        elif _is_number(row.get("value")):
            series[key].points.append(point(row["run_started_at"], row, note=f"run {row['run_id']}"))
    return list(series.values())


def _provenance(store: Store, run_id: str, target: str, verdicts: Verdicts) -> tuple[list[str], list[str]]:
    run = store.get_run(run_id)
    assert run is not None                         # the report found this run in the store
    run["target_status"] = {t: s for t, s in (run.get("target_status") or {}).items() if t == target}
    run["targets"] = [target]
    resets = verdicts.baseline_resets(store, run, target)
    return provenance_lines(run, store.run_entries(run_id, target=target)), resets


def _section(store: Store, verdicts: Verdicts, target: str, suite: str, rows: list[dict[str, Any]],
             firing: list[FiringAlert], latest_id: str | None = None) -> Section:
    runs = list({row["run_id"]: RunInfo(row["run_id"], row["run_started_at"], row["run_status"])
                 for row in rows}.values())
    latest = next(r for r in runs if r.id == latest_id) if latest_id else _latest_run(runs)
    latest_rows = [row for row in rows if row["run_id"] == latest.id]
    checks = defaultdict(list)
    for check in verdicts.slo_checks(latest_rows, {"id": latest.id, "suite": suite}):
        condition = f"{check.rule.comparator} {check.rule.threshold:g}"
        checks[check.metric["id"]].append(SloResult(check.rule.name, condition, check.rule.severity, check.broken))
    # the values the trends plot, so that the table and the charts agree
    recent: dict[tuple[str, str, str], list[float | None]] = defaultdict(list)
    for row in rows:
        if row["run_status"] == "complete":
            recent[_series_key(row)].append(row.get("value"))
    history = _history(rows)
    examples = pick_examples(store.samples(latest.id, target=target))
    calibration = host_calibration(store, latest.id)
    probes = []
    for probe in dict.fromkeys(row["probe"] for row in latest_rows):
        probe_rows = [row for row in latest_rows if row["probe"] == probe]
        probe_history = [s for s in history if s.probe == probe]
        alerting = {a.metric for a in firing} | {row["name"] for row in probe_rows
                                                  if any(r.broken for r in checks.get(row["id"], []))}
        trends = trend_plots(probe_history)
        probes.append(ProbeSection(
            probe=probe,
            metrics=[LatestMetric(probe, row["name"], row.get("labels") or {}, row.get("value"), row.get("ci_low"),
                                  row.get("ci_high"), row.get("n"), row.get("unit"), checks.get(row["id"], []),
                                  recent[_series_key(row)], row.get("flags") or None,
                                  calibration.for_figure(row["name"], row.get("labels") or {}) if calibration
                                  else None) for row in probe_rows],
            plots=suite_plots(probe, probe_rows, probe_history),
            trends=trends,
            examples=[e for e in examples if e.probe == probe],
            alerting_metrics=[plot.title for plot in trends if plot.title in alerting]))
    provenance, resets = _provenance(store, latest.id, target, verdicts)
    return Section(target=target, suite=suite, runs=runs, latest_run=latest, probes=probes, firing=firing,
                   provenance=provenance, baseline_resets=resets)


def _anchor_keys(keys: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str, str], tuple[str, ...]]:
    """(target, suite, site) -> what its anchor is made of: (target, suite) while the report has
    that target and suite from one site only, so that a single-site store keeps its anchors."""
    sites: dict[tuple[str, str], int] = defaultdict(int)
    for target, suite, _ in keys:
        sites[(target, suite)] += 1
    return {key: key if sites[key[:2]] > 1 else key[:2] for key in keys}


def collect(store: Store, verdicts: Verdicts, since: dt.datetime | None = None,
            target: str | None = None, run_id: str | None = None, batch: str | None = None) -> Report:
    """The report over the runs started since `since` (all runs when None), for one target or all,
    a section per target, suite and site; with `batch`, over that batch's runs only.

    With `run_id`, the page of that run: a section per target it stored metrics for, with that run
    as the latest and the history up to it (ConfigError when there is no such run)."""
    run: RunInfo | None = None
    suite: str | None = None
    site: str | None = None
    if run_id is not None:
        found = store.get_run(run_id)
        if found is None:
            raise ConfigError(f"no run with id {run_id!r}")
        run, suite, site = RunInfo(found["id"], found["started_at"], found["status"]), found["suite"], found["site"]
    grouped: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in store.metric_history(since=since, target=target, suite=suite, site=site, batch=batch):
        if run is None or row["run_started_at"] <= run.started_at:
            grouped[(row["target"], row["suite"], row["run_site"] or "")].append(row)
    if run is not None:
        grouped = defaultdict(list, {key: rows for key, rows in grouped.items()
                                     if any(row["run_id"] == run.id for row in rows)})
    anchor_keys = _anchor_keys(list(grouped))
    names = anchors(list(anchor_keys.values()))
    firing: dict[tuple[str, str, str], list[FiringAlert]] = defaultdict(list)
    every_firing = []
    for alert in store.alerts(state="firing"):
        if target is not None and alert["target"] != target:
            continue
        alert_site = (alert.get("detail") or {}).get("site") or ""
        # an alert stored before sites were belongs to its target and suite from every site
        keys = [key for key in grouped if key[:2] == (alert["target"], alert["suite"])
                and alert_site in ("", key[2])]
        shown = FiringAlert(alert["name"], alert["kind"], alert["severity"], alert["metric"],
                            alert.get("labels") or {}, alert["summary"], alert.get("fired_at"),
                            target=alert["target"], suite=alert["suite"],
                            anchor=names[anchor_keys[keys[0]]] if keys else "", site=alert_site)
        for key in keys:
            firing[key].append(shown)
        every_firing.append(shown)
    sections = []
    for key, rows in sorted(grouped.items()):
        section = _section(store, verdicts, key[0], key[1], rows, firing[key],
                           latest_id=run.id if run is not None else None)
        section.site, section.anchor = key[2], names[anchor_keys[key]]
        sections.append(section)
    return Report(generated_at=utcnow(), since=since, target=target, store_url=store.url, sections=sections,
                  firing=every_firing, run=run, batch=batch)
