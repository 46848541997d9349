"""A suite entry's parameters as the report shows them: only those that differ from the probe's own
defaults, as rows of a table. A probe declares some twenty parameters; the reader wants the few
that the suite set (the request counts, the levels, the model-specific thresholds), not a
paragraph of every one. `prober show` keeps the full list (prober/reports/run_lines.py).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pydantic

from prober.core.probe_registry import probe_class


@dataclass(frozen=True)
class Parameter:
    name: str
    value: str                 # as JSON
    default: str | None        # as JSON; None where the probe declares no default (or is not installed)


@dataclass
class EntryParameters:
    """One suite entry of a run on one target."""

    entry: str
    probe: str
    version: Any
    changed: list[Parameter] = field(default_factory=list)
    at_default: int = 0        # parameters left out: equal to the probe's default


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


@functools.lru_cache(maxsize=64)
def _defaults(probe: str) -> dict[str, str]:
    """The probe's parameters that have a default, as JSON; {} for a probe that is not installed or
    whose parameters cannot all be defaulted."""
    cls = probe_class(probe)
    params = getattr(cls, "Params", None)
    if params is None:
        return {}
    try:
        return {name: _json(value) for name, value in params().model_dump(mode="json").items()}
    except pydantic.ValidationError:      # (a required parameter: nothing is known to be a default)
        return {}


def entry_parameters(entries: Sequence[dict[str, Any]], target: str) -> list[EntryParameters]:
    """The suite entries of `target` (run_entries rows) with the parameters that differ from their
    probe's defaults."""
    found = []
    for entry in entries:
        if entry["target"] != target:
            continue
        defaults = _defaults(entry["probe"])
        shown = EntryParameters(entry["entry"], entry["probe"], entry.get("probe_version"))
        for name, value in sorted((entry.get("params") or {}).items()):
            text, default = _json(value), defaults.get(name)
            if text == default:
                shown.at_default += 1
            else:
                shown.changed.append(Parameter(name, text, default))
        found.append(shown)
    return found
