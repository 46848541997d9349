"""The report as JSON, for dashboards and scripts: the collected model as it is, times in ISO 8601
UTC. json.dumps escapes nothing that matters to JSON consumers; the consumer decides how to show
the text."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from typing import Any

from reports.collect import Report


def _default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _finite(value: Any) -> Any:
    """NaN and infinities are not JSON: they become null, like a metric without a value."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def render_json(report: Report) -> str:
    model = _finite(dataclasses.asdict(report))
    for section, source in zip(model["sections"], report.sections):
        section["slo_summary"] = {"held": sum(1 for _, r in source.slo_results if not r.broken),
                                  "broken": sum(1 for _, r in source.slo_results if r.broken)}
    return json.dumps(model, default=_default, indent=1, allow_nan=False)
