"""`prober history`: one metric's values over time, selected the way SLO rules select them."""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prober.core.errors import ConfigError
from prober.core.probe_registry import all_metric_names, did_you_mean
from prober.core.records import label_text
from prober.store import Store


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


# More rows than this and `prober history` shows one row per week (min, median, max) unless --all.
SUMMARIZE_ABOVE = 100


@dataclass
class WeekSummary:
    """One ISO week of one series (suite, target, labels): the values of its complete runs."""

    week: dt.date                      # the Monday the week starts on (UTC)
    suite: str
    target: str
    labels: str
    unit: str | None
    runs: int = 0
    values: list[float] = field(default_factory=list)
    not_complete: int = 0              # runs of the week whose target did not complete: not summarized

    @property
    def low(self) -> float | None:
        return min(self.values) if self.values else None

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    @property
    def high(self) -> float | None:
        return max(self.values) if self.values else None


def weekly(rows: Sequence[dict[str, Any]]) -> list[WeekSummary]:
    """metric_over_time rows as one summary per week and series, oldest week first."""
    weeks: dict[tuple[Any, ...], WeekSummary] = {}
    for row in rows:
        started = row["run_started_at"].astimezone(dt.UTC).date()
        monday = started - dt.timedelta(days=started.weekday())
        labels = label_text(row.get("labels"))
        key = (monday, row["suite"], row["target"], labels, row.get("unit"))
        week = weeks.setdefault(key, WeekSummary(*key))
        week.runs += 1
        if row["run_status"] != "complete":
            week.not_complete += 1
        elif isinstance(row.get("value"), (int, float)) and math.isfinite(row["value"]):
            week.values.append(float(row["value"]))
    return sorted(weeks.values(), key=lambda w: (w.week, w.suite, w.target, w.labels))
