"""A few stored outputs worth a human look: those each probe picks (its `examples`, for instance
divergent answers or corrupted JSON as the probe judges them), and errors.

The text is model output (or an endpoint's error message) and untrusted: the renderers escape it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from prober.core.probe_registry import find_probe
from prober.core.records import SampleRow
from prober.reports.plots import label_text

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


def pick_examples(samples: Sequence[SampleRow]) -> list[Example]:
    """Per probe, up to MAX_EXAMPLES of the outputs it picks and of its failed requests, from one
    run's samples of one target."""
    by_probe: dict[str, list[SampleRow]] = defaultdict(list)
    for row in samples:
        if row.get("final", True):
            by_probe[row["probe"]].append(row)
    examples: list[Example] = []
    for probe, rows in sorted(by_probe.items()):
        declared = find_probe(probe)
        if declared is not None:
            noted = declared.examples([r for r in rows if not r.get("error_type")])
            examples += [_example(n.row, n.why, n.text) for n in noted[:MAX_EXAMPLES]]
        errors: dict[tuple[str, str | None], SampleRow] = {}
        for r in rows:
            if error_type := r.get("error_type"):
                errors.setdefault((error_type, r.get("error_message")), r)
        examples += [_example(r, f"failed: {kind}", message) for (kind, message), r in errors.items()][:MAX_EXAMPLES]
    return examples
