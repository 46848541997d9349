"""A few stored outputs worth a human look: divergent answers, corrupted or unparseable JSON (as
the penalty and schema-order probes judge it), errors.

The text is model output (or an endpoint's error message) and untrusted: the renderers escape it.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from prober.records import SampleRow
from probes.penalty import analyse_row, answer_text
from probes.schema_order import output_json_text
from reports.plots import label_text

MAX_EXAMPLES = 3
MAX_CHARS = 800


@dataclass
class Example:
    probe: str
    case: str
    labels: str
    why: str
    text: str


def _clip(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + f"... ({len(text) - MAX_CHARS} more characters)"


def _example(row: SampleRow, why: str, text: str | None) -> Example:
    return Example(probe=row["probe"], case=row["case"], labels=label_text(row.get("labels")), why=why,
                   text=_clip(text))


def _parses(text: str | None) -> bool:
    try:
        json.loads(text or "")
    except ValueError:
        return False
    return True


def _corrupted(rows: Sequence[SampleRow]) -> list[Example]:
    """Penalty answers the probe's own analysis calls corrupted, with where they first went wrong."""
    found = []
    for row in rows:
        labels = row.get("labels") or {}
        if not {"mode", "n_records"} <= labels.keys():
            continue
        analysis = analyse_row(row)
        if analysis.corrupted:
            where = (f"corrupted JSON: {analysis.first_corruption_kind or 'damaged'} after "
                     f"{analysis.first_corruption_index} intact record(s)")
            found.append(_example(row, where, answer_text(row)))
    return found


def _divergent(rows: Sequence[SampleRow]) -> list[Example]:
    """Outputs unlike the most common output of their case (the same prompt at any concurrency)."""
    by_case: dict[str, list[SampleRow]] = defaultdict(list)
    for row in rows:
        by_case[row["case"]].append(row)
    found, seen = [], set()
    for case_rows in by_case.values():
        modal = Counter(r["output_sha256"] for r in case_rows).most_common(1)[0][0]
        for row in case_rows:
            if row["output_sha256"] != modal and row["output_sha256"] not in seen:
                seen.add(row["output_sha256"])
                found.append(_example(row, "differs from the most common output of its prompt", row.get("output_text")))
    return found


def pick_examples(samples: Sequence[SampleRow]) -> list[Example]:
    """Up to MAX_EXAMPLES per kind, per probe, from one run's samples of one target."""
    by_probe: dict[str, list[SampleRow]] = defaultdict(list)
    for row in samples:
        if row.get("final", True):
            by_probe[row["probe"]].append(row)
    examples: list[Example] = []
    for probe, rows in sorted(by_probe.items()):
        ok = [r for r in rows if not r.get("error_type")]
        if probe == "divergence":
            examples += _divergent(ok)[:MAX_EXAMPLES]
        if probe == "penalty":
            examples += _corrupted(ok)[:MAX_EXAMPLES]
        if probe == "schema_order":
            examples += [_example(r, "output is not valid JSON", text)
                         for r in ok if not _parses(text := output_json_text(r.get("output_text"), r.get("tool_calls")))
                         ][:MAX_EXAMPLES]
        errors: dict[tuple[str, str | None], SampleRow] = {}
        for r in rows:
            if error_type := r.get("error_type"):
                errors.setdefault((error_type, r.get("error_message")), r)
        examples += [_example(r, f"failed: {kind}", message) for (kind, message), r in errors.items()][:MAX_EXAMPLES]
    return examples
