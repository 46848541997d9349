"""`prober show RUN [--probe P] [--label K=V ...]`: a run's provenance, its metrics (those of one
probe, or with these labels, when asked) and the state of every SLO rule."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console

from prober.alerting.accept import accept_lines
from prober.alerting.drift import drift_for_run
from prober.alerting.sensitivity import power_lines
from prober.alerting.slo_rules import RuleState, rule_state_lines, rule_states
from prober.commands.store_access import require_run
from prober.commands.terminal import print_inert, print_metrics
from prober.core.config import ProberConfig
from prober.core.errors import ConfigError
from prober.core.findings import FINDING_CODES
from prober.core.records import Metric
from prober.reports.history import parse_label_filters
from prober.reports.run_lines import provenance_lines
from prober.run.store_access import open_store


def _matches(row: dict[str, Any], probe: str | None, labels: dict[str, str]) -> bool:
    found = row.get("labels") or {}
    return (probe is None or row["probe"] == probe) and all(
        key in found and str(found[key]) == value for key, value in labels.items())


def show_run(config: ProberConfig, run_id: str, out: Console, err: Console, probe: str | None = None,
             label_filters: Sequence[str] = (), target: str | None = None, as_json: bool = False) -> None:
    """Print the run (or, `as_json`, write its prober.show/1 document); ConfigError for an unknown run
    or a filter that matches none of its metrics."""
    wanted = parse_label_filters(label_filters)
    store = open_store(config.store.url, err, create=False)
    try:
        found = require_run(store, run_id, target)
        rows = [row for row in store.metrics(found["id"]) if target is None or row["target"] == target]
        entries = store.run_entries(found["id"])
        accepted = [line for name in found.get("targets") or []
                    for line in accept_lines(store, name, found.get("site") or "")]
        tests = drift_for_run(store, found, config.drift, p_values=False).tests if config.drift.enabled else []
    finally:
        store.close()
    chosen = [row for row in rows if _matches(row, probe, wanted)]
    if rows and not chosen:
        filters = ", ".join([f"probe {probe}"] * (probe is not None) + [f"{k}={v}" for k, v in wanted.items()])
        probes = ", ".join(sorted({row["probe"] for row in rows}))
        raise ConfigError(f"run {found['id']} has no metrics with {filters} (its probes: {probes})")
    if as_json:
        from prober.commands.json_output import show_document, write_document

        write_document(out.file, show_document(found, entries, chosen, slo_states(config, found, entries, rows)))
        return
    metrics = [Metric(**{k: r[k] for k in ("run_id", "target", "probe", "name", "value", "labels", "ci_low",
                                           "ci_high", "n", "unit", "flags")}) for r in chosen]
    print_inert(out, provenance_lines(found, entries))
    shown_count = "" if len(chosen) == len(rows) else f", {len(chosen)} of {len(rows)} metrics"
    print_metrics(out, metrics, title=f"run {found['id']}: {found['suite']} ({found['status']}){shown_count}")
    print_inert(out, rule_state_lines(found, entries, rows, config.slo))   # every rule, filtered or not
    print_inert(out, accepted)
    print_inert(out, [f"sensitivity: {target_name} {line}" for target_name in found.get("targets") or []
                      for line in power_lines(tests, target_name)])
    print_inert(out, known_lines(config, found.get("targets") or []))


def known_lines(config: ProberConfig, target_names: Sequence[str]) -> list[str]:
    """The known findings of each of the run's targets (as configured now): what it records as
    notices instead of findings."""
    lines = []
    for name in target_names:
        target = config.targets.get(name)
        if target is not None and target.known:
            described = "; ".join(f"{code} ({FINDING_CODES[code]})" for code in target.known)
            lines.append(f"known findings on target {name}, kept as notices: {described}")
    return lines


def slo_states(config: ProberConfig, run: dict[str, Any], entries: Sequence[dict[str, Any]],
               rows: Sequence[dict[str, Any]]) -> list[RuleState]:
    """Every SLO rule's state on each target that completed the run (those `rule_state_lines` prints)."""
    states = []
    for name, state in (run.get("target_status") or {}).items():
        if state["status"] == "complete":
            probes = list(dict.fromkeys(e["probe"] for e in entries if e["target"] == name))
            states += rule_states(config.slo, run, name, probes, rows)
    return states
