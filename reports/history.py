"""`prober history`: one metric's values over time, selected the way SLO rules select them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from prober.core.errors import ConfigError
from prober.core.probe_registry import all_metric_names, did_you_mean
from store import Store


def parse_label_filters(texts: Sequence[str]) -> dict[str, str]:
    """`--labels concurrency=16` (repeatable, or comma-separated: `prompt=story,concurrency=16`)."""
    wanted: dict[str, str] = {}
    for text in texts:
        for item in filter(None, (part.strip() for part in text.split(","))):
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--labels {text!r}: expected KEY=VALUE")
            wanted[key.strip()] = value.strip()
    return wanted


def metric_over_time(store: Store, metric: str, *, target: str | None = None, suite: str | None = None,
                     labels: dict[str, str] | None = None, since: dt.datetime | None = None) -> list[dict[str, Any]]:
    """The metric's rows, oldest run first. `suite` names the run's suite or the metric's probe (so
    `--suite latency` also finds the latency metrics of nightly runs); each label filter compares
    the label's text. ConfigError when nothing matches, naming the filters."""
    rows = [row for row in store.metric_history(name=metric, target=target, since=since)
            if (suite is None or suite in (row["suite"], row["probe"]))
            and all(key in (row.get("labels") or {}) and str(row["labels"][key]) == value
                    for key, value in (labels or {}).items())]
    if not rows and metric not in (all_metric_names() or {metric}):
        raise ConfigError(f"no probe produces metric {metric!r}{did_you_mean(metric)}")
    if not rows:
        filters = [f"target {target}" if target else "", f"suite {suite}" if suite else "",
                   ", ".join(f"{k}={v}" for k, v in (labels or {}).items())]
        shown = "; ".join(part for part in filters if part)
        raise ConfigError(f"no stored values of metric {metric!r}{f' ({shown})' if shown else ''} in {store.url}")
    return rows
