"""`--json` of `prober runs`, `show`, `history` and `run`: one JSON document on stdout, with a
`schema` naming its shape and version (docs/json-output.md). A field is only ever added within a
version; renaming or removing one makes the next version, so a script can check `schema` first.

Everything is masked like the terminal (prober/core/redact.py) and written as plain JSON:
datetimes in ISO 8601 UTC, NaN and infinities as null.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import IO, Any

from prober.alerting.slo_rules import RuleState
from prober.core.redact import redact_value
from prober.reports.compare_render import jsonable

RUNS_SCHEMA = "prober.runs/1"
SHOW_SCHEMA = "prober.show/1"
HISTORY_SCHEMA = "prober.history/1"
RUN_SCHEMA = "prober.run/1"

RUN_FIELDS = ("id", "suite", "site", "batch", "status", "started_at", "finished_at", "prober_version", "host")
METRIC_FIELDS = ("target", "probe", "name", "value", "labels", "ci_low", "ci_high", "n", "unit", "flags")


def write_document(stream: IO[str], document: dict[str, Any]) -> None:
    """The document as one line of JSON, masked, then flushed (a pipe reader sees it whole)."""
    stream.write(json.dumps(jsonable(redact_value(document)), allow_nan=False) + "\n")
    stream.flush()


def _targets(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"target": target, "status": state["status"], "reason": state.get("reason")}
            for target, state in (run.get("target_status") or {}).items()]


def run_summary(run: dict[str, Any]) -> dict[str, Any]:
    """A stored run as `runs` and `show` describe it."""
    summary = {key: run.get(key) for key in RUN_FIELDS}
    summary["targets"] = _targets(run)
    if "sample_count" in run:
        summary["samples"] = run.get("sample_count", 0)
        summary["errors"] = run.get("error_count", 0)
    return summary


def runs_document(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return {"schema": RUNS_SCHEMA, "runs": [run_summary(row) for row in rows]}


def rule_state(state: RuleState) -> dict[str, Any]:
    rule = state.rule
    return {"rule": rule.name, "target": state.target, "state": state.state, "metric": rule.metric,
            "comparator": rule.comparator, "threshold": rule.threshold, "severity": rule.severity,
            "for": rule.for_runs, "matched": state.matched, "detail": state.detail}


def show_document(run: dict[str, Any], entries: Sequence[dict[str, Any]], metrics: Sequence[dict[str, Any]],
                  states: Sequence[RuleState]) -> dict[str, Any]:
    """A run, what each suite entry measured, its metrics (as filtered) and every SLO rule's state."""
    return {"schema": SHOW_SCHEMA, "run": run_summary(run),
            "entries": [{key: entry.get(key) for key in ("target", "entry", "probe", "probe_version", "params")}
                        for entry in entries],
            "metrics": [{key: row.get(key) for key in METRIC_FIELDS} for row in metrics],
            "slo": [rule_state(state) for state in states]}


def history_document(metric: str, rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Every value of the metric, oldest run first (never summarized per week: a script wants all)."""
    return {"schema": HISTORY_SCHEMA, "metric": metric, "values": [
        {"run_id": row["run_id"], "run_started_at": row["run_started_at"], "run_status": row.get("run_status"),
         "suite": row.get("suite"), "site": row.get("run_site"),
         **{key: row.get(key) for key in METRIC_FIELDS if key != "name"}} for row in rows]}


def _alert(row: dict[str, Any]) -> dict[str, Any]:
    detail = row.get("detail") or {}
    return {"name": row["name"], "kind": row["kind"], "severity": row["severity"], "summary": row["summary"],
            "breaks": row.get("breaks"), "for": detail.get("for")}


def run_verdicts(run_id: str, suite: str, status: str, exit_code: int, targets: dict[str, tuple[str, str | None]],
                 slo_states: dict[str, list[RuleState]], firing: Sequence[dict[str, Any]],
                 pending: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """`prober run --json`: the run's final verdicts, per target."""
    verdicts = []
    for target, (target_status, reason) in targets.items():
        states = slo_states.get(target, [])
        verdicts.append({
            "target": target, "status": target_status, "reason": reason,
            "slo": {state: sum(1 for s in states if s.state == state) for state in ("held", "broken", "no data")},
            "firing": [_alert(row) for row in firing if row["target"] == target],
            "pending": [_alert(row) for row in pending if row["target"] == target]})
    return {"schema": RUN_SCHEMA, "run_id": run_id, "suite": suite, "status": status, "exit_code": exit_code,
            "targets": verdicts}
