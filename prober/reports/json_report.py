"""The report as JSON, for dashboards and scripts: the collected model as it is, times in ISO 8601
UTC. json.dumps escapes nothing that matters to JSON consumers; the consumer decides how to show
the text."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from typing import Any

from prober.reports.collect import Report


def _default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _plain(value: Any) -> Any:
    """The model as JSON values, walked once (dataclasses.asdict deep-copies every point first):
    NaN and infinities, which are not JSON, become null like a metric without a value."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def render_json(report: Report) -> str:
    model = _plain(report)
    for section, source in zip(model["sections"], report.sections):
        section["slo_summary"] = {"held": sum(1 for _, r in source.slo_results if not r.broken),
                                  "broken": sum(1 for _, r in source.slo_results if r.broken)}
    return json.dumps(model, default=_default, indent=1, allow_nan=False)
