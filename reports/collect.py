"""Read the store into a report: per target and suite, the latest run's metrics judged against the
SLO rules, every metric's values over time, each suite's own charts, and a few sample outputs.

The renderers (html, markdown, json_report) only format what is collected here. The verdicts (SLO
checks, baseline resets) come from the `Verdicts` the command layer passes in: reports render them
and import no alerting code.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from prober.core.config import SloRule
from prober.core.errors import ConfigError
from prober.core.records import labels_key, utcnow
from reports.calibration import Overhead, host_calibration
from reports.examples import Example, pick_examples
from reports.plots import MetricSeries, Plot, point, suite_plots, trend_plots
from reports.run_lines import provenance_lines
from store import Store

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*$")
_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str | None, now: dt.datetime | None = None) -> dt.datetime | None:
    """`30d`, `12h`, `2w`, `90m` before now, or an ISO date/time (UTC unless it says otherwise)."""
    if not text:
        return None
    now = now or utcnow()
    match = _DURATION.match(text)
    if match:
        return now - dt.timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])
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


@dataclass
class ProbeSection:
    probe: str
    metrics: list[LatestMetric]
    plots: list[Plot]
    trends: list[Plot]
    examples: list[Example]


@dataclass
class Section:
    """One target and suite."""

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


def _series_key(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["probe"], row["name"], labels_key(row.get("labels"))


def _latest_run(runs: list[RunInfo]) -> RunInfo:
    """The newest complete run; the newest run of any status when none completed."""
    complete = [r for r in runs if r.status == "complete"]
    return (complete or runs)[-1]


def _history(rows: Sequence[dict[str, Any]]) -> list[MetricSeries]:
    series: dict[tuple[str, str, str], MetricSeries] = {}
    for row in rows:
        key = _series_key(row)
        if key not in series:
            series[key] = MetricSeries(row["probe"], row["name"], row.get("labels") or {}, row.get("unit"))
        if isinstance(row.get("value"), (int, float)) and math.isfinite(row["value"]):
            series[key].points.append(point(row["run_started_at"], row, note=f"run {row['run_id']}"))
    return list(series.values())


def _provenance(store: Store, run_id: str, target: str, verdicts: Verdicts) -> tuple[list[str], list[str]]:
    run = store.get_run(run_id)
    assert run is not None                         # the report found this run in the store
    run["target_status"] = {t: s for t, s in (run.get("target_status") or {}).items() if t == target}
    run["targets"] = [target]
    resets = verdicts.baseline_resets(store, run, target)
    return provenance_lines(run, store.run_entries(run_id, target=target)), resets


def _section(store: Store, verdicts: Verdicts, target: str, suite: str,
             rows: list[dict[str, Any]], firing: list[FiringAlert]) -> Section:
    runs = list({row["run_id"]: RunInfo(row["run_id"], row["run_started_at"], row["run_status"])
                 for row in rows}.values())
    latest = _latest_run(runs)
    latest_rows = [row for row in rows if row["run_id"] == latest.id]
    checks = defaultdict(list)
    for check in verdicts.slo_checks(latest_rows, {"id": latest.id, "suite": suite}):
        condition = f"{check.rule.comparator} {check.rule.threshold:g}"
        checks[check.metric["id"]].append(SloResult(check.rule.name, condition, check.rule.severity, check.broken))
    recent: dict[tuple[str, str, str], list[float | None]] = defaultdict(list)
    for row in rows:
        recent[_series_key(row)].append(row.get("value"))
    history = _history(rows)
    examples = pick_examples(store.samples(latest.id, target=target))
    calibration = host_calibration(store, latest.id)
    probes = []
    for probe in dict.fromkeys(row["probe"] for row in latest_rows):
        probe_rows = [row for row in latest_rows if row["probe"] == probe]
        probe_history = [s for s in history if s.probe == probe]
        probes.append(ProbeSection(
            probe=probe,
            metrics=[LatestMetric(probe, row["name"], row.get("labels") or {}, row.get("value"), row.get("ci_low"),
                                  row.get("ci_high"), row.get("n"), row.get("unit"), checks.get(row["id"], []),
                                  recent[_series_key(row)], row.get("flags") or None,
                                  calibration.for_figure(row["name"], row.get("labels") or {}) if calibration
                                  else None) for row in probe_rows],
            plots=suite_plots(probe, probe_rows, probe_history),
            trends=trend_plots(probe_history),
            examples=[e for e in examples if e.probe == probe]))
    provenance, resets = _provenance(store, latest.id, target, verdicts)
    return Section(target=target, suite=suite, runs=runs, latest_run=latest, probes=probes, firing=firing,
                   provenance=provenance, baseline_resets=resets)


def collect(store: Store, verdicts: Verdicts, since: dt.datetime | None = None,
            target: str | None = None) -> Report:
    """The report over the runs started since `since` (all runs when None), for one target or all."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in store.metric_history(since=since, target=target):
        grouped[(row["target"], row["suite"])].append(row)
    firing: dict[tuple[str, str], list[FiringAlert]] = defaultdict(list)
    for alert in store.alerts(state="firing"):
        firing[(alert["target"], alert["suite"])].append(FiringAlert(
            alert["name"], alert["kind"], alert["severity"], alert["metric"], alert.get("labels") or {},
            alert["summary"], alert.get("fired_at")))
    sections = [_section(store, verdicts, target_name, suite, rows, firing[(target_name, suite)])
                for (target_name, suite), rows in sorted(grouped.items())]
    return Report(generated_at=utcnow(), since=since, target=target, store_url=store.url, sections=sections)
