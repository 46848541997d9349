"""Terminal lines about a run as a whole: each target's status and reason, what each suite entry
measured (provenance), and the SLO rules' states. Used by `prober run`, `prober runs` and
`prober show`; the CLI escapes every line (reasons and parameters may carry endpoint text)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from prober.config import SloRule
from reports.slo_rules import RuleState, rule_states, slo_line


def target_status_text(run: dict[str, Any]) -> str:
    """`a: complete; b: failed (connection refused)`; the bare target list for runs stored before
    per-target status was."""
    recorded = run.get("target_status") or {}
    if not recorded:
        return ", ".join(run.get("targets") or [])
    parts = []
    for target, state in recorded.items():
        reason = f" ({state['reason']})" if state.get("reason") else ""
        parts.append(f"{target}: {state['status']}{reason}")
    return "; ".join(parts)


def target_lines(targets: dict[str, tuple[str, str | None]], slo_states: dict[str, list[RuleState]]) -> list[str]:
    """The last lines of `prober run`: one per target, `SLOs: N held, M broken, K no data` for a
    target that completed, its status and reason for one that did not."""
    lines = []
    for target, (status, reason) in targets.items():
        if status == "complete":
            lines.append(slo_line(target, slo_states.get(target, [])))
        else:
            lines.append(f"{target}: {status}{f' ({reason})' if reason else ''}; SLOs not checked")
    return lines


def provenance_lines(run: dict[str, Any], entries: Sequence[dict[str, Any]]) -> list[str]:
    """What the run measured: prober's version, and per target its status, reason, config hash and
    each suite entry's probe version and effective parameters."""
    lines = [f"prober {run['prober_version']}, config {run['config_hash']}, host {run['host']}"]
    recorded = run.get("target_status") or {}
    for target in recorded or run.get("targets") or []:
        state = recorded.get(target)
        if state is None:
            lines.append(f"target {target}: (no per-target record)")
            continue
        reason = f": {state['reason']}" if state.get("reason") else ""
        lines.append(f"target {target}: {state['status']}{reason} (target config {state['config_hash']})")
        for entry in (e for e in entries if e["target"] == target):
            effective = sorted((entry.get("params") or {}).items())
            params = ", ".join(f"{key}={json.dumps(value)}" for key, value in effective)
            lines.append(f"  {entry['entry']}: {entry['probe']} probe v{entry['probe_version']}, params {params}")
    return lines


def rule_state_lines(run: dict[str, Any], entries: Sequence[dict[str, Any]], metric_rows: Iterable[dict[str, Any]],
                     rules: Sequence[SloRule]) -> list[str]:
    """Each SLO rule's state per completed target (held, broken, no data, with its worst row), then
    the target's summary line."""
    if not rules:
        return ["no SLO rules configured"]
    rows = list(metric_rows)
    lines = []
    for target, state in (run.get("target_status") or {}).items():
        if state["status"] != "complete":
            lines.append(f"{target}: {state['status']}; SLOs not checked")
            continue
        probes = list(dict.fromkeys(e["probe"] for e in entries if e["target"] == target))
        states = rule_states(rules, run, target, probes, rows)
        lines += [f"slo {s.rule.name} on {target}: {s.state}: {s.detail}" for s in states]
        lines.append(slo_line(target, states))
    return lines
