"""What a stored metric row is, for whoever judges it: the drift tests (prober/alerting/drift.py)
and comparisons of two runs or windows (prober/reports/compare.py) read rows the same way.

The row functions take a metric row dict; the value functions take its fields, for a reader that
files a baseline's hundred thousand rows as tuples and decides per row only what its value decides
(`may_be_share` depends on the probe, name and unit alone)."""

from __future__ import annotations

import math
from typing import Any

from prober.core.probe_registry import metric_family


def judgeable(row: dict[str, Any]) -> bool:
    """A row with a value and no flags (a flagged value is too poorly estimated to judge)."""
    return judgeable_value(row.get("value"), bool(row.get("flags")))


def judgeable_value(value: float | None, flagged: bool) -> bool:
    return not flagged and value is not None and not math.isnan(value)


def is_proportion(row: dict[str, Any]) -> bool:
    """A share of n trials with its Wilson interval: value * n is a whole count. (Differences of two
    shares carry unit "ratio" and an interval too: their probe declares them another kind.)"""
    return (may_be_share(row["probe"], row["name"], row.get("unit"))
            and whole_share(row.get("value"), row.get("n"), row.get("ci_low"), bool(row.get("flags"))))


def may_be_share(probe: str, name: str, unit: str | None) -> bool:
    """Can a row of this probe, name and unit be a share? Unit "ratio", and no family of another kind."""
    family = metric_family(probe, name)
    return unit == "ratio" and (family is None or family.kind == "share")


def whole_share(value: float | None, n: int | None, ci_low: float | None, flagged: bool) -> bool:
    """The value part of `is_proportion`: a judgeable share in [0, 1] of n trials, with an interval,
    that is a whole count of them."""
    if not n or not judgeable_value(value, flagged) or value is None or not 0.0 <= value <= 1.0 or ci_low is None:
        return False
    return bool(abs(value * n - round(value * n)) < 1e-6 * n)
