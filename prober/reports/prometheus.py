"""`prober export --format prometheus`: the latest complete run of every target and suite, from
each site, as a file for node_exporter's textfile collector (Prometheus text exposition format 0.0.4).

Each metric becomes a gauge `prober_<probe>_<name>` with the labels target, suite, site and the
metric's own labels; Wilson/percentile bounds become `..._ci_low` and `..._ci_high` gauges. Names follow
Prometheus conventions so that `promtool check metrics` has nothing to say: milliseconds become
seconds, and the suffixes reserved for counters, histograms and summaries (`_total`, `_count`,
`_sum`, `_bucket`) are dropped or reworded. `prober_last_run_timestamp_seconds`
tells when each target and suite last completed, so a stale file can be alerted on.

State series for dashboards and alert rules (deploy/prometheus/prober-rules.yml) sit beside them:
`prober_alert_firing` (1 firing, 0 pending or resolved; per alert prober keeps), `prober_slo_broken`
(1 broken, 0 held; per SLO rule and metric row of the latest complete run), `prober_run_status`
(1 for the status of the latest run of each target and suite, 0 for the other statuses), and
`prober_last_complete_run_age_seconds` as of `prober_export_timestamp_seconds` (the file is
static: a rule computes the live age as `time() - prober_last_run_timestamp_seconds`).
`prober_expected_interval_seconds` is each target and suite's own cadence: the median time between
the starts of its recent complete runs, written only once it has CADENCE_MIN_RUNS of them, so that a
one-off pair (a `calibrate` run, a suite tried once) has no cadence and is never stale.

A label whose value is missing (a stored None, such as the penalty value of the no-penalty
baseline) is left out of the series rather than written as "None": Prometheus reads an absent
label and an empty one alike.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from prober.core.controlchars import escape_controls
from prober.core.records import utcnow
from prober.reports.run_lines import target_states

if TYPE_CHECKING:
    from prober.reports.collect import Verdicts
    from prober.store import Store

_INVALID_NAME = re.compile(r"[^a-zA-Z0-9_:]")
_INVALID_LABEL = re.compile(r"[^a-zA-Z0-9_]")
_RESERVED_LABELS = frozenset({"target", "suite", "site", "job", "instance"})
# unit column -> (factor to the base unit, name suffixes meaning the old unit, base-unit suffix)
_UNITS = {"ms": (0.001, ("_ms",), "_seconds"), "s": (1.0, ("_s", "_secs"), "_seconds")}
# Name parts `promtool check metrics` takes for abbreviated units: such a part gets an "x"
# (schema_order's discordant_b_only is exported as discordant_bx_only).
_UNIT_ABBREVIATIONS = frozenset({"s", "ms", "us", "ns", "sec", "b", "kb", "mb", "gb", "tb", "pb", "m", "h", "d"})
# Suffixes Prometheus reserves for counters, histograms and summaries; these are gauges.
_RESERVED_SUFFIXES = {"_total": "", "_count": "_number", "_sum": "_sum_value", "_bucket": "_bucket_value"}


def metric_name(text: str) -> str:
    name = _INVALID_NAME.sub("_", text)
    return name if re.match(r"[a-zA-Z_:]", name) else f"_{name}"


def label_name(text: str) -> str:
    name = _INVALID_LABEL.sub("_", str(text))
    if not re.match(r"[a-zA-Z_]", name) or name.startswith("__"):
        name = f"label_{name.lstrip('_')}"
    return f"label_{name}" if name in _RESERVED_LABELS else name


def label_value(value: Any) -> str:
    # Control characters first, as visible escapes whose backslash is then escaped like any
    # other: the exposition format has only the escapes \\, \" and \n.
    return escape_controls(str(value), keep="\n").replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _help_text(text: str) -> str:
    return escape_controls(text, keep="\n").replace("\\", "\\\\").replace("\n", "\\n")


RUN_STATUSES = ("running", "complete", "interrupted", "failed")


def _number(value: float) -> str:
    return repr(float(value))


def gauge_name(probe: str, name: str, unit: str | None) -> tuple[str, float]:
    """The family name for a stored metric, and the factor that converts its value."""
    factor = 1.0
    if unit in _UNITS:
        factor, old_suffixes, base_suffix = _UNITS[unit]
        for suffix in old_suffixes:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
        name += base_suffix
    for reserved, replacement in _RESERVED_SUFFIXES.items():
        if name.endswith(reserved):
            name = name[: -len(reserved)] + replacement
    full = metric_name(f"prober_{probe}_{name}")
    # promtool reads a name part such as `b` (in discordant_b_only) as an abbreviated unit
    return "_".join(f"{part}x" if part.lower() in _UNIT_ABBREVIATIONS else part for part in full.split("_")), factor


@dataclass
class _Family:
    help: str
    samples: dict[tuple[tuple[str, str], ...], float] = field(default_factory=dict)


# Runs looked at for each target's latest run status: far more than the suites a store runs a day.
RECENT_RUNS = 500


def recent_runs(store: Store, *, since: dt.datetime | None = None, run_id: str | None = None,
                target: str | None = None) -> list[dict[str, Any]]:
    """The newest RECENT_RUNS runs (list_runs rows) within the export's filters."""
    return [run for run in store.list_runs(limit=RECENT_RUNS, target=target, since=since, counts=False)
            if run_id is None or run["id"] == run_id]


# A cadence needs this many complete runs (two intervals): fewer is a one-off, not a schedule.
CADENCE_MIN_RUNS = 3
# The newest intervals the median is taken over: a schedule that changed shows within a week or so.
CADENCE_INTERVALS = 7


# (target, suite, site): what a latest run is the latest of; two sites' runs never hide each other.
Key = tuple[str, str, str]


def _key(row: dict[str, Any]) -> Key:
    """The key of a metric_history row."""
    return row["target"], row["suite"], row.get("run_site") or ""


def _key_labels(key: Key) -> dict[str, str]:
    target, suite, site = key
    return {"target": target, "suite": suite, **({"site": site} if site else {})}


def latest_complete_runs(rows: Iterable[dict[str, Any]]) -> dict[Key, str]:
    """(target, suite, site) -> id of its newest complete run, from metric_history rows (oldest first)."""
    latest: dict[Key, str] = {}
    for row in rows:
        if row["run_status"] == "complete":
            latest[_key(row)] = row["run_id"]
    return latest


def metric_labels(labels: dict[str, Any] | None) -> dict[str, str]:
    """A stored metric's labels as Prometheus labels; a None value is left out, never "None"."""
    return {label_name(k): str(v) for k, v in sorted((labels or {}).items()) if v is not None}


def _labels_text(labels: dict[str, Any] | None) -> str:
    """A label set in one label value (alerts and SLO rows name the metric row they judge)."""
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items()) if v is not None)


class _Families:
    def __init__(self) -> None:
        self.families: dict[str, _Family] = {}

    def add(self, name: str, help_text: str, labels: dict[str, str], value: float) -> None:
        family = self.families.setdefault(name, _Family(help_text))
        family.samples[tuple(sorted(labels.items()))] = value

    def text(self) -> str:
        lines = []
        for name in sorted(self.families):
            family = self.families[name]
            lines += [f"# HELP {name} {_help_text(family.help)}", f"# TYPE {name} gauge"]
            for label_pairs, value in family.samples.items():
                rendered = ",".join(f'{key}="{label_value(text)}"' for key, text in label_pairs)
                lines.append(f"{name}{{{rendered}}} {_number(value)}" if rendered else f"{name} {_number(value)}")
        return "\n".join(lines) + "\n" if lines else ""


def _metric_families(out: _Families, rows: list[dict[str, Any]], latest: dict[Key, str]) -> None:
    for row in rows:
        if latest.get(_key(row)) != row["run_id"]:
            continue
        value = row.get("value")
        if value is None or not math.isfinite(value):
            continue
        name, factor = gauge_name(row["probe"], row["name"], row.get("unit"))
        labels = {**_key_labels(_key(row)), **metric_labels(row.get("labels"))}
        what = f"prober {row['probe']} metric {row['name']}" + (f" ({row['unit']})" if row.get("unit") else "")
        out.add(name, what, labels, value * factor)
        for bound in ("ci_low", "ci_high"):
            if row.get(bound) is not None and math.isfinite(row[bound]):
                out.add(f"{name}_{bound}", f"{what}: {bound.replace('_', ' ')} of its 95% interval", labels,
                        row[bound] * factor)


def _run_families(out: _Families, rows: list[dict[str, Any]], latest: dict[Key, str],
                  runs: Sequence[dict[str, Any]], now: dt.datetime) -> None:
    finished: dict[Key, dt.datetime] = {}
    for row in rows:
        if latest.get(_key(row)) == row["run_id"]:
            finished[_key(row)] = row["run_finished_at"] or row["run_started_at"]
    for key, when in finished.items():
        out.add("prober_last_run_timestamp_seconds", "when the latest complete run of this target and suite finished",
                _key_labels(key), when.timestamp())
        out.add("prober_last_complete_run_age_seconds", "seconds from the latest complete run of this target and "
                "suite finishing to this export (prober_export_timestamp_seconds)",
                _key_labels(key), max(0.0, (now - when).total_seconds()))
    newest: dict[Key, str] = {}
    for run in sorted(runs, key=lambda r: r["started_at"]):     # the newest run of each target wins
        for target, (status, _) in target_states(run).items():
            newest[(target, run["suite"], run.get("site") or "")] = status
    for key, status in newest.items():
        for known in dict.fromkeys([*RUN_STATUSES, status]):
            out.add("prober_run_status", "1 for the status of the latest run of this target and suite, else 0",
                    {**_key_labels(key), "status": known}, float(known == status))


def expected_intervals(runs: Sequence[dict[str, Any]]) -> dict[Key, float]:
    """(target, suite, site) -> the median seconds between the starts of its newest complete runs
    (list_runs rows, any order); only pairs with at least CADENCE_MIN_RUNS complete runs."""
    starts: dict[Key, list[dt.datetime]] = {}
    for run in runs:
        for target, (status, _) in target_states(run).items():
            if status == "complete":
                starts.setdefault((target, run["suite"], run.get("site") or ""), []).append(run["started_at"])
    cadence = {}
    for key, times in starts.items():
        if len(times) < CADENCE_MIN_RUNS:
            continue
        newest = sorted(times)[-(CADENCE_INTERVALS + 1):]
        cadence[key] = statistics.median((later - earlier).total_seconds() for earlier, later in pairwise(newest))
    return cadence


def _cadence_families(out: _Families, runs: Sequence[dict[str, Any]]) -> None:
    for key, seconds in expected_intervals(runs).items():
        out.add("prober_expected_interval_seconds", "the usual seconds between complete runs of this target and "
                "suite (median of its recent ones; absent for a one-off pair)", _key_labels(key), seconds)


def _alert_families(out: _Families, alerts: Sequence[dict[str, Any]]) -> None:
    for alert in alerts:
        site = (alert.get("detail") or {}).get("site") or ""
        labels = {**_key_labels((alert["target"], alert["suite"], site)), "alert": alert["name"],
                  "kind": alert["kind"], "severity": alert["severity"], "metric": alert["metric"],
                  "metric_labels": _labels_text(alert.get("labels"))}
        out.add("prober_alert_firing", "1 while this prober alert fires, 0 when it is pending or resolved",
                labels, float(alert["state"] == "firing"))


def _slo_families(out: _Families, rows: list[dict[str, Any]], latest: dict[Key, str],
                  verdicts: Verdicts) -> None:
    for key, run_id in latest.items():
        target, suite, _ = key
        run_rows = [row for row in rows if row["run_id"] == run_id and row["target"] == target]
        for check in verdicts.slo_checks(run_rows, {"id": run_id, "suite": suite}):
            labels = {**_key_labels(key), "slo": check.rule.name, "severity": check.rule.severity,
                      "metric": check.metric["name"], "metric_labels": _labels_text(check.metric.get("labels"))}
            out.add("prober_slo_broken", "1 when the SLO rule is broken by the latest complete run, 0 when it holds",
                    labels, float(check.broken))


def exposition(rows: list[dict[str, Any]], *, runs: Sequence[dict[str, Any]] = (),
               alerts: Sequence[dict[str, Any]] = (), verdicts: Verdicts | None = None,
               now: dt.datetime | None = None) -> str:
    """The textfile for the latest complete run of each target and suite among `rows`
    (metric_history rows, oldest run first); with `runs` (list_runs rows) each target's latest run
    status, with `alerts` (alert rows) their states, with `verdicts` the SLO states."""
    now = now or utcnow()
    latest = latest_complete_runs(rows)
    out = _Families()
    _metric_families(out, rows, latest)
    _run_families(out, rows, latest, runs, now)
    _cadence_families(out, runs)
    _alert_families(out, alerts)
    if verdicts is not None:
        _slo_families(out, rows, latest, verdicts)
    if not out.families:
        return ""
    out.add("prober_export_timestamp_seconds", "when prober wrote this file", {}, now.timestamp())
    return out.text()


def describe(rows: list[dict[str, Any]]) -> str:
    """One line naming the runs exported, for the CLI."""
    latest = latest_complete_runs(rows)
    return "; ".join(f"{target} / {suite}{f' from {site}' if site else ''}: run {run_id}"
                     for (target, suite, site), run_id in sorted(latest.items())) or "no complete run"



PUSH_JOB = "prober"


def pushgateway_url(base_url: str, instance: str) -> str:
    """Where `prober export --push` sends the textfile on a Prometheus Pushgateway: the group of job
    `prober` and instance `instance` (the exporting site), so that sites pushing to one gateway keep
    their own groups. The value goes base64-encoded (the gateway's `label@base64` form), so that no
    character of a site (`:`, `+`) needs URL escaping."""
    encoded = base64.urlsafe_b64encode(instance.encode()).decode() or "="
    return f"{base_url.rstrip('/')}/metrics/job/{PUSH_JOB}/instance@base64/{encoded}"
