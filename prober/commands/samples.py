"""`prober samples`: the requests of a run, one block each (timings, usage, findings, output), or
one JSON object a line for scripts.

Everything shown came from an endpoint and is untrusted: in the terminal its control characters
are written as escapes (prober/core/controlchars.py) and rich markup is inert (the `shown` the CLI
passes in); JSON escapes them itself. Both streams mask the configured secrets (the CLI's consoles
write through prober/core/redact.py), and stored request headers were redacted before storage.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

from rich.console import Console

from prober.commands.store_access import require_run
from prober.core.config import ProberConfig
from prober.core.records import SampleRow
from prober.core.redact import redact_value
from prober.reports.compare_render import jsonable
from prober.reports.history import parse_label_filters
from prober.reports.plots import label_text
from prober.reports.svg import fmt
from prober.run.store_access import open_store

# Output characters shown per sample in the terminal; --json carries all that was stored.
OUTPUT_SHOWN = 240
# Timings shown, in the order of a request's life.
TIMINGS = (("headers", "headers_ms"), ("first byte", "first_byte_ms"), ("ttft", "ttft_ms"), ("end", "end_ms"))


def samples_command(cfg: ProberConfig, out: Console, err: Console, shown: Callable[[Any], str], run_id: str,
                    target: str | None, labels: list[str], errors_only: bool, as_json: bool) -> int:
    """Print the run's matching samples; returns how many matched."""
    wanted = parse_label_filters(labels)
    store = open_store(cfg.store.url, err, create=False)
    try:
        run = require_run(store, run_id, target)
        rows = store.samples(run["id"], target=target)
    finally:
        store.close()
    matched = [row for row in rows if _matches(row, wanted, errors_only)]
    if as_json:
        for row in matched:
            out.file.write(json.dumps(jsonable(redact_value(dict(row))), allow_nan=False) + "\n")
            out.file.flush()
    else:
        width = max(40, out.width)
        for row in matched:
            for line in sample_lines(row):
                # Escaped first (an escape is longer than its character), then wrapped under its block.
                for part in textwrap.wrap(shown(line), width, subsequent_indent="    ", drop_whitespace=False) or [""]:
                    out.print(part, soft_wrap=True)
    if not matched:
        err.print(f"no samples in run {shown(run['id'])} match"
                  + (f" (labels {shown(label_text(wanted))})" if wanted else "")
                  + (" with an error" if errors_only else ""))
    return len(matched)


def _matches(row: SampleRow, wanted: dict[str, str], errors_only: bool) -> bool:
    labels = row.get("labels") or {}
    return ((not errors_only or bool(row.get("error_type")))
            and all(key in labels and str(labels[key]) == value for key, value in wanted.items()))


def sample_lines(row: SampleRow) -> list[str]:
    """One sample as a few lines of plain (unescaped) text."""
    attempt = f"attempt {row.get('attempt', 1)}" + ("" if row.get("final", True) else ", retried")
    head = (f"#{row.get('request_index', 0)} ({attempt}) {row.get('target')} / {row.get('probe')} / "
            f"{row.get('case')}  {label_text(row.get('labels'), skip=())}")
    timings = ", ".join(f"{name} {fmt(value)} ms" for name, key in TIMINGS
                        if isinstance(value := row.get(key), (int, float)))
    status = f"HTTP {row['http_status']}" if row.get("http_status") is not None else "no response"
    usage = ", ".join(f"{key} {value}" for key, value in _flat(row.get("usage") or {}))
    lines = [head, f"  {status}, finish {row.get('finish_reason') or '-'}; {timings or 'no timings'}",
             f"  usage: {usage or 'not reported'}"]
    if row.get("error_type"):
        lines.append(f"  error: {row['error_type']}: {row.get('error_message') or ''}")
    if row.get("findings"):
        lines.append(f"  findings: {'; '.join(row['findings'] or [])}")
    if row.get("rejected_params"):
        lines.append(f"  rejected parameters: {', '.join(row['rejected_params'] or [])}")
    text = row.get("output_text") or ""
    if text or row.get("tool_calls"):
        cut = "..." if len(text) > OUTPUT_SHOWN or row.get("output_truncated") else ""
        lines.append(f"  output ({row.get('output_chars', len(text))} chars): {text[:OUTPUT_SHOWN]}{cut}")
    for call in row.get("tool_calls") or []:
        lines.append(f"  tool call: {json.dumps(call, default=str)[:OUTPUT_SHOWN]}")
    return lines


def _flat(usage: dict[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    """Usage as the wire reported it, nested details as dotted keys (prompt_tokens_details.cached_tokens)."""
    for key, value in usage.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value
