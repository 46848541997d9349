"""What a stored metric row is, for whoever judges it: the drift tests (prober/alerting/drift.py)
and comparisons of two runs or windows (reports/compare.py) read rows the same way."""

from __future__ import annotations

import math
from typing import Any

from prober.core.probe_registry import metric_family


def judgeable(row: dict[str, Any]) -> bool:
    """A row with a value and no flags (a flagged value is too poorly estimated to judge)."""
    value = row.get("value")
    return not row.get("flags") and value is not None and not math.isnan(value)


def is_proportion(row: dict[str, Any]) -> bool:
    """A share of n trials with its Wilson interval: value * n is a whole count. (Differences of two
    shares carry unit "ratio" and an interval too: their probe declares them another kind.)"""
    value, n = row.get("value"), row.get("n")
    family = metric_family(row["probe"], row["name"])
    if (row.get("unit") != "ratio" or (family is not None and family.kind != "share") or not n
            or not judgeable(row) or value is None or not 0.0 <= value <= 1.0 or row.get("ci_low") is None):
        return False
    return bool(abs(value * n - round(value * n)) < 1e-6 * n)
