"""`prober export --format prometheus`: the latest complete run of every target and suite as a
file for node_exporter's textfile collector (Prometheus text exposition format 0.0.4).

Each metric becomes a gauge `prober_<probe>_<name>` with the labels target, suite and the metric's
own labels; Wilson/percentile bounds become `..._ci_low` and `..._ci_high` gauges. Names follow
Prometheus conventions so that `promtool check metrics` has nothing to say: milliseconds become
seconds, and the suffixes reserved for counters, histograms and summaries (`_total`, `_count`,
`_sum`, `_bucket`) are dropped or reworded. `prober_last_run_timestamp_seconds`
tells when each target and suite last completed, so a stale file can be alerted on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prober.core.controlchars import escape_controls

_INVALID_NAME = re.compile(r"[^a-zA-Z0-9_:]")
_INVALID_LABEL = re.compile(r"[^a-zA-Z0-9_]")
_RESERVED_LABELS = frozenset({"target", "suite", "job", "instance"})
# unit column -> (factor to the base unit, name suffixes meaning the old unit, base-unit suffix)
_UNITS = {"ms": (0.001, ("_ms",), "_seconds"), "s": (1.0, ("_s", "_secs"), "_seconds")}
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
    return metric_name(f"prober_{probe}_{name}"), factor


@dataclass
class _Family:
    help: str
    samples: dict[tuple[tuple[str, str], ...], float] = field(default_factory=dict)


def latest_complete_runs(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """(target, suite) -> id of its newest complete run, from metric_history rows (oldest first)."""
    latest: dict[tuple[str, str], str] = {}
    for row in rows:
        if row["run_status"] == "complete":
            latest[(row["target"], row["suite"])] = row["run_id"]
    return latest


def exposition(rows: list[dict[str, Any]]) -> str:
    """The textfile for the latest complete run of each target and suite among `rows`
    (metric_history rows, oldest run first)."""
    latest = latest_complete_runs(rows)
    families: dict[str, _Family] = {}

    def add(name: str, help_text: str, labels: dict[str, str], value: float) -> None:
        family = families.setdefault(name, _Family(help_text))
        family.samples[tuple(sorted(labels.items()))] = value

    finished: dict[tuple[str, str], float] = {}
    for row in rows:
        key = (row["target"], row["suite"])
        if latest.get(key) != row["run_id"]:
            continue
        when = row["run_finished_at"] or row["run_started_at"]
        finished[key] = when.timestamp()
        value = row.get("value")
        if value is None or not math.isfinite(value):
            continue
        name, factor = gauge_name(row["probe"], row["name"], row.get("unit"))
        labels = {"target": row["target"], "suite": row["suite"]}
        labels.update({label_name(k): str(v) for k, v in sorted((row.get("labels") or {}).items())})
        what = f"prober {row['probe']} metric {row['name']}" + (f" ({row['unit']})" if row.get("unit") else "")
        add(name, what, labels, value * factor)
        for bound in ("ci_low", "ci_high"):
            if row.get(bound) is not None and math.isfinite(row[bound]):
                add(f"{name}_{bound}", f"{what}: {bound.replace('_', ' ')} of its 95% interval", labels,
                    row[bound] * factor)
    for (target, suite), timestamp in finished.items():
        add("prober_last_run_timestamp_seconds", "when the latest complete run of this target and suite finished",
            {"target": target, "suite": suite}, timestamp)

    lines = []
    for name in sorted(families):
        family = families[name]
        lines += [f"# HELP {name} {_help_text(family.help)}", f"# TYPE {name} gauge"]
        for label_pairs, value in family.samples.items():
            rendered = ",".join(f'{key}="{label_value(text)}"' for key, text in label_pairs)
            lines.append(f"{name}{{{rendered}}} {_number(value)}")
    return "\n".join(lines) + "\n" if lines else ""


def describe(rows: list[dict[str, Any]]) -> str:
    """One line naming the runs exported, for the CLI."""
    latest = latest_complete_runs(rows)
    return "; ".join(f"{target} / {suite}: run {run_id}" for (target, suite), run_id in sorted(latest.items())) \
        or "no complete run"

