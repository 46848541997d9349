"""What an open trend draws over its points, so that a reader sees why it is open: the band of the
baseline a drift alert judged the metric against, the SLO threshold a broken rule holds it to, and
a mark where each alert naming it paged.

A trend is one metric name (its title), one series per label set; an alert names a metric or a
drift family that reads it (latency's family `ttft_ms` reads `ttft_p50_ms`, prober/core/
declarations.MetricFamily), with the family's labels (the probe's pooled labels left out). The band
is drawn from the trend's own points: the values of the series the alert's labels select, over the
`baseline_runs` points before the drift began (`detail.drift_since`), so it is what the reader can
check against the chart, not a second computation of the drift test.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prober.core.probe_registry import metric_family
from prober.reports.plots import Band, MetricSeries, Plot
from prober.reports.svg import fmt


@dataclass(frozen=True)
class AlertOnTrend:
    """What of a firing alert an open trend needs (a FiringAlert, or an SLO rule broken now)."""

    name: str
    kind: str                        # "slo" | "drift"
    probe: str
    metric: str
    labels: dict[str, Any]
    fired_at: dt.datetime | None
    detail: dict[str, Any]


def moved_families(detail: dict[str, Any]) -> list[str]:
    """The families that moved, as the alert of families that page together (a probe's latency
    families, prober.alerting.drift.page_group) stores them; [] for any other alert."""
    moved = detail.get("families")
    return [name for name in moved if isinstance(name, str)] if isinstance(moved, list) else []


def names_trend(alert: AlertOnTrend, probe: str, title: str) -> bool:
    """Whether `alert` is about the trend of metric `title` of `probe`: it names that metric, or a
    family that reads it, itself or (an alert for a group of families that page together, such
    as a probe's latency families) among the families that moved, `detail["families"]`."""
    if alert.metric == title:
        return True
    if alert.probe and alert.probe != probe:
        return False
    for name in [alert.metric, *moved_families(alert.detail)]:
        family = metric_family(probe, name)
        if family is not None and family.name == name and family.reads(title):
            return True
    return False


def _when(value: Any) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, str):
        try:
            return _when(dt.datetime.fromisoformat(value))
        except ValueError:
            return None
    return None


def _selected(series: Sequence[MetricSeries], title: str, labels: dict[str, Any]) -> list[MetricSeries]:
    """The series of `title` whose labels agree with every label the alert names."""
    chosen = [s for s in series if s.name == title]
    return [s for s in chosen if all(s.labels.get(key) == value for key, value in labels.items()
                                     if key in s.labels)]


def _band(alert: AlertOnTrend, series: Sequence[MetricSeries], title: str) -> Band | None:
    since = _when(alert.detail.get("drift_since")) or alert.fired_at
    runs = alert.detail.get("baseline_runs")
    if since is None or not isinstance(runs, int) or runs < 1:
        return None
    values: list[float] = []
    starts: list[dt.datetime] = []
    for found in _selected(series, title, alert.labels):
        before = [p for p in found.points if isinstance(p.x, dt.datetime) and p.x < since][-runs:]
        values += [p.y for p in before]
        starts += [p.x for p in before if isinstance(p.x, dt.datetime)]
    if not values:
        return None
    low, high = min(values), max(values)
    label = (f"baseline of {alert.name}: {fmt(low)} to {fmt(high)}, the range of the last {runs} "
             f"value(s) before the drift began ({since:%Y-%m-%d %H:%M} UTC)")
    return Band(low, high, min(starts), label)


def add_guides(plot: Plot, probe: str, series: Sequence[MetricSeries], alerts: Sequence[AlertOnTrend]) -> bool:
    """Give trend `plot` (of metric plot.title) the guides of the alerts and broken rules naming
    it; whether any names it (the trend is then drawn open)."""
    band = None
    levels: list[tuple[float, str]] = []
    pages: list[tuple[dt.datetime, str]] = []
    named = False
    for alert in alerts:
        if not names_trend(alert, probe, plot.title):
            continue
        named = True
        if alert.kind == "drift" and band is None:
            band = _band(alert, series, plot.title)
        threshold, comparator = alert.detail.get("threshold"), alert.detail.get("comparator")
        if alert.kind == "slo" and isinstance(threshold, (int, float)) and not isinstance(threshold, bool):
            level = (float(threshold), f"SLO {alert.name}: healthy when {comparator} {fmt(threshold)}")
            if level not in levels:
                levels.append(level)
        if alert.fired_at is not None:
            pages.append((alert.fired_at, f"{alert.name} paged {alert.fired_at:%Y-%m-%d %H:%M} UTC"))
    plot.band, plot.levels, plot.pages = band, levels, sorted(set(pages))
    return named
