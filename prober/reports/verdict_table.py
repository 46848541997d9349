"""The verdict table every report page and `prober status` open with: one row per target and site,
its state (healthy, SLO broken, drifting, failed, no data), since which run, the metric and its
change with its interval, and where to see the requests behind it.

Which state a target is in is decided by the `Verdicts` the command layer hands in
(prober.alerting.verdicts.ReportVerdicts.target_state); this module gathers what that decision
needs from the report's sections, its firing alerts and the window's newest runs, and renders
nothing itself (html, markdown and prober/commands/status.py do).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prober.reports.plots import label_text
from prober.reports.svg import fmt, interval_text
from prober.reports.trend_guides import moved_families

if TYPE_CHECKING:
    from prober.reports.collect import FiringAlert, LatestMetric, Report, Section, Verdicts
    from prober.store import Store

# The window's newest runs read to find each target's latest status and how long it has held.
RECENT_RUNS = 200


@dataclass
class VerdictRow:
    target: str
    site: str
    state: str                       # one of prober.alerting.verdicts.TARGET_STATES
    since_run: str = ""              # the first run of the state ("" for no data)
    since_at: dt.datetime | None = None
    suite: str = ""
    metric: str = ""                 # the metric that decided it, with its labels
    change: str = ""                 # its value and interval, against the threshold or the baseline
    run_id: str = ""                 # the run whose requests show it
    anchor: str = ""                 # its section in the report over the window
    labels: dict[str, Any] | None = None

    @property
    def samples_command(self) -> str:
        """The `prober samples` filters that list the requests behind this row."""
        if not self.run_id:
            return ""
        labels = "".join(f" --label {key}={value}" for key, value in sorted((self.labels or {}).items()))
        return f"prober samples {self.run_id} --target {self.target}{labels}"

    def as_json(self) -> dict[str, Any]:
        return {"target": self.target, "site": self.site, "state": self.state, "since_run": self.since_run,
                "since": self.since_at.isoformat() if self.since_at else None, "suite": self.suite,
                "metric": self.metric, "change": self.change, "run_id": self.run_id,
                "samples": self.samples_command}


@dataclass
class _Seen:
    """One run of one target at one site, newest first: its id, start and the target's status."""

    run_id: str
    started_at: dt.datetime
    status: str
    reason: str
    suite: str


def _recent_statuses(store: Store, since: dt.datetime | None, target: str | None,
                     batch: str | None) -> dict[tuple[str, str], list[_Seen]]:
    """(target, site) -> the finished runs that listed it, newest first (a running run has no
    verdict yet)."""
    found: dict[tuple[str, str], list[_Seen]] = {}
    for run in store.list_runs(limit=RECENT_RUNS, target=target, batch=batch, since=since, counts=False):
        if run["status"] == "running":
            continue
        states = run.get("target_status") or {name: {"status": run["status"], "reason": ""}
                                               for name in run.get("targets") or []}
        for name, status in states.items():
            if target is not None and name != target:
                continue
            found.setdefault((name, run.get("site") or ""), []).append(
                _Seen(run["id"], run["started_at"], status["status"], status.get("reason") or "", run["suite"]))
    return found


def _streak_start(seen: Sequence[_Seen], failed: bool) -> _Seen:
    """The oldest run of the newest unbroken streak of failed (or of not failed) runs."""
    start = seen[0]
    for run in seen[1:]:
        if (run.status in ("failed", "interrupted")) != failed:
            break
        start = run
    return start


def _run_at(seen: Sequence[_Seen], when: dt.datetime | None) -> _Seen:
    """The newest run started at or before `when` (an alert fires as the run that judged it ends)."""
    if when is not None:
        for run in seen:
            if run.started_at <= when:
                return run
    return seen[-1]


def _metric_name(name: str, labels: dict[str, Any] | None) -> str:
    shown = label_text(labels or {})
    return f"{name} {{{shown}}}" if shown else name


def _drifted(alert: FiringAlert) -> str:
    """What a drift alert says moved: its family, or for the alert of families that page together
    (a probe's latency families) those of them that moved, `ttft_ms+e2e_ms`."""
    return "+".join(moved_families(alert.detail)) or alert.metric


def _value_text(m: LatestMetric) -> str:
    unit = f" {m.unit}" if m.unit else ""
    return f"{fmt(m.value)}{unit} (95% CI {interval_text(m.ci_low, m.ci_high, m.flags)})"


def _latest_metric(sections: Sequence[Section], name: str, labels: dict[str, Any]) -> LatestMetric | None:
    for section in sections:
        for probe in section.probes:
            for m in probe.metrics:
                if m.name == name and m.labels == labels:
                    return m
    return None


def _row(verdicts: Verdicts, target: str, site: str, seen: Sequence[_Seen], sections: Sequence[Section],
         firing: Sequence[FiringAlert]) -> VerdictRow:
    if not seen:
        return VerdictRow(target, site, verdicts.target_state(None, False, ()), change="no run in the window")
    # (the evidence behind the state the verdicts chose: the newest run's status, a broken SLO of
    # its metrics, a firing SLO or drift alert)
    newest = seen[0]
    broken = [(section, m, result) for section in sections for m, result in section.slo_results if result.broken]
    state = verdicts.target_state(newest.status, bool(broken), [alert.kind for alert in firing])
    row = VerdictRow(target, site, state, suite=newest.suite, run_id=newest.run_id,
                     anchor=sections[0].anchor if sections else "")
    if state == verdicts.FAILED:
        first = _streak_start(seen, failed=True)
        row.since_run, row.since_at, row.change = first.run_id, first.started_at, newest.reason or newest.status
        return row
    slo_alerts = [alert for alert in firing if alert.kind == "slo"]
    drift_alerts = [alert for alert in firing if alert.kind == "drift"]
    if state == verdicts.SLO_BROKEN:
        if broken:
            section, m, result = broken[0]
            row.suite, row.anchor, row.run_id = section.suite, section.anchor, section.latest_run.id
            row.metric, row.labels = _metric_name(m.name, m.labels), m.labels
            row.change = f"{_value_text(m)}, healthy when {result.condition}"
        alert = slo_alerts[0] if slo_alerts else None
        if alert is not None and not broken:
            row.metric, row.labels, row.change = _metric_name(alert.metric, alert.labels), alert.labels, alert.summary
        first = _run_at(seen, alert.fired_at) if alert is not None else newest
        row.since_run, row.since_at = first.run_id, first.started_at
        return row
    if state == verdicts.DRIFTING and drift_alerts:
        alert = drift_alerts[0]
        latest = _latest_metric(sections, alert.metric, alert.labels)
        row.metric, row.labels = _metric_name(_drifted(alert), alert.labels), alert.labels
        row.change = alert.summary + (f"; now {_value_text(latest)}" if latest is not None else "")
        first = _run_at(seen, alert.fired_at)
        row.since_run, row.since_at = first.run_id, first.started_at
        return row
    first = _streak_start(seen, failed=False)
    row.since_run, row.since_at = first.run_id, first.started_at
    return row


def verdict_rows(store: Store, verdicts: Verdicts, report: Report, expected: Sequence[str] = ()) -> list[VerdictRow]:
    """One row per target and site of the report's window (and per `expected` target, the
    configured ones, at each site the window saw: a target with no run there has no data), the
    worst state first, then by target and site."""
    seen = _recent_statuses(store, report.since, report.target, report.batch)
    sites = sorted({site for _, site in seen} | {section.site for section in report.sections}) or [""]
    keys = set(seen) | {(section.target, section.site) for section in report.sections}
    keys |= {(name, site) for name in expected if report.target in (None, name) for site in sites}
    rows = []
    for target, site in keys:
        sections = [s for s in report.sections if (s.target, s.site) == (target, site)]
        firing = [a for a in report.firing if a.target == target and a.site in ("", site)]
        rows.append(_row(verdicts, target, site, seen.get((target, site), []), sections, firing))
    order = {state: index for index, state in enumerate(verdicts.states)}
    return sorted(rows, key=lambda row: (order.get(row.state, len(order)), row.target, row.site))
