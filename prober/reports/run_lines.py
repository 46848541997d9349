"""Terminal lines about a run as a whole: each target's status and reason, and what each suite
entry measured (provenance). Used by `prober runs`, `prober show` and the report; the CLI escapes
every line (reasons and parameters may carry endpoint text). The SLO rules' lines are verdicts and
live in prober/alerting/slo_rules.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


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


def target_states(run: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """target -> (its own status in the run, the reason or ""); the run's status for a target with
    no record of its own (runs stored before per-target status was)."""
    recorded = run.get("target_status") or {}
    return {target: ((recorded.get(target) or {}).get("status") or run["status"],
                     (recorded.get(target) or {}).get("reason") or "")
            for target in dict.fromkeys([*(run.get("targets") or []), *recorded])}


def provenance_lines(run: dict[str, Any], entries: Sequence[dict[str, Any]]) -> list[str]:
    """What the run measured: prober's version, and per target its status, reason, config hash and
    each suite entry's probe version and effective parameters."""
    where = f", site {run['site']}" if run.get("site") else ""
    batch = f", batch {run['batch']}" if run.get("batch") else ""
    lines = [f"prober {run['prober_version']}, config {run['config_hash']}, host {run['host']}{where}{batch}"]
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
