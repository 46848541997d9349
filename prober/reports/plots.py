"""What a report plots: the charts each probe declares (its `charts`, prober/core/declarations.py) and
the trend charts, built from metric rows.

Charts are described here as data (`Plot`); prober/reports/svg.py draws them. Every builder selects
metrics by name and labels and returns None when there is nothing to draw, so a suite that did not
produce a metric (an older prober, a case that was off, a probe that is still to land) simply has
fewer charts.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prober.core import records, stats
from prober.core.declarations import Chart
from prober.core.probe_registry import find_probe

# Labels that name a run's phase rather than a measured condition: never a series of their own.
_IGNORED_LABELS = frozenset({"phase"})
# A trend chart with more series than this is unreadable; the rest stay in `prober history`.
MAX_TREND_SERIES = 6


@dataclass
class Point:
    x: float | str | dt.datetime
    y: float
    low: float | None = None
    high: float | None = None
    note: str = ""


@dataclass
class PlotSeries:
    label: str
    points: list[Point]


@dataclass(frozen=True)
class Band:
    """A range of values shaded from `start` to the chart's right edge (a trend's baseline)."""

    low: float
    high: float
    start: dt.datetime
    label: str


@dataclass
class Plot:
    title: str
    x_label: str
    y_label: str
    # "number" (linear), "log2" (concurrency sweeps), "time" (per run) or "category" (variants)
    x_kind: str
    series: list[PlotSeries]
    note: str = ""
    y_unit: str = ""
    omitted_series: int = 0
    # runs drawn as a vertical mark, not a point (a failed run): (x, why)
    marks: list[tuple[dt.datetime, str]] = field(default_factory=list)
    # An open trend's guides (prober/reports/trend_guides.py): the baseline band, horizontal lines
    # at SLO thresholds (value, what), and a vertical mark where an alert paged (when, what).
    band: Band | None = None
    levels: list[tuple[float, str]] = field(default_factory=list)
    pages: list[tuple[dt.datetime, str]] = field(default_factory=list)
    # A folded trend: drawn small, its series as lines without a mark or tooltip per point (the
    # metric table lists the recent values; `prober history` every one).
    compact: bool = False


@dataclass
class MetricSeries:
    """One metric (probe, name, label set) of a target and suite, a value per run."""

    probe: str
    name: str
    labels: dict[str, Any]
    unit: str | None
    points: list[Point] = field(default_factory=list)
    # runs whose value is not data (failed, interrupted, running): (run started, why)
    marks: list[tuple[dt.datetime, str]] = field(default_factory=list)


def label_text(labels: dict[str, Any] | None, skip: Iterable[str] = ()) -> str:
    """prober.core.records.label_text without the labels a report never shows (`phase`)."""
    return records.label_text(labels, set(skip) | _IGNORED_LABELS)


def _number(value: Any) -> float | None:
    """A label value as a number (labels come back from JSON as int, float or text)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def point(x: float | str | dt.datetime, row: Mapping[str, Any], note: str | None = None) -> Point:
    """A metric row's value and interval at x; a bound that is not a finite number is left out."""
    low, high = row.get("ci_low"), row.get("ci_high")
    bounded = _finite(low) and _finite(high)
    if note is None:
        note = f"n={row['n']}" if row.get("n") is not None else ""
    return Point(x, row["value"], low if bounded else None, high if bounded else None, note=note)


def versus(rows: Sequence[Mapping[str, Any]], names: Sequence[str], x: str, title: str, y_label: str,
           x_label: str | None = None, series_by: Sequence[str] | None = None) -> Plot | None:
    """Metrics `names` against the numeric label `x`, one series per remaining label set (and per
    name when there are several). Error bars from ci_low/ci_high where the metric has them.

    With `series_by`, one series per value of those labels instead, and the cells of a proportion
    that fall on the same series and x are pooled: their counts are added and the interval is
    Wilson's over the sum (a grid of 50 cells becomes a few readable lines)."""
    grouped: dict[str, list[Point]] = defaultdict(list)
    pooled: dict[tuple[str, float], list[int]] = defaultdict(lambda: [0, 0])
    unit = ""
    for row in rows:
        labels = row.get("labels") or {}
        x_value = _number(labels.get(x))
        if row["name"] not in names or x_value is None or not _finite(row.get("value")):
            continue
        if series_by is None:
            rest = label_text(labels, skip=[x])
        else:
            rest = ", ".join(f"{key}={labels.get(key)}" for key in series_by)
        key = " ".join(part for part in (row["name"] if len(names) > 1 else "", rest) if part) or row["name"]
        unit = unit or (row.get("unit") or "")
        if series_by is None:
            grouped[key].append(point(x_value, row))
        elif row.get("n"):
            counts = pooled[(key, x_value)]
            counts[0] += round(row["value"] * row["n"])
            counts[1] += row["n"]
    for (key, x_value), (hits, n) in pooled.items():
        share, low, high = stats.proportion(hits, n)
        if share is not None:
            grouped[key].append(Point(x_value, share, low, high, note=f"{hits}/{n} pooled"))
    if not grouped:
        return None
    xs = [p.x for points in grouped.values() for p in points if isinstance(p.x, float)]
    spread = max(xs) / min(xs) if min(xs) > 0 else 0
    series = [PlotSeries(label, sorted(points, key=lambda p: p.x)) for label, points in sorted(grouped.items())]
    return Plot(title=title, x_label=x_label or x, y_label=y_label, x_kind="log2" if spread >= 8 else "number",
                series=series, y_unit=unit)


def categories(rows: Sequence[Mapping[str, Any]], name: str, x: str, title: str, y_label: str) -> Plot | None:
    """Metric `name` for each value of the label `x` (e.g. a schema variant), one series per
    remaining label set."""
    grouped: dict[str, list[Point]] = defaultdict(list)
    for row in rows:
        labels = row.get("labels") or {}
        if row["name"] != name or x not in labels or not _finite(row.get("value")):
            continue
        grouped[label_text(labels, skip=[x]) or name].append(point(str(labels[x]), row))
    if not grouped:
        return None
    return Plot(title=title, x_label=x, y_label=y_label, x_kind="category",
                series=[PlotSeries(label, points) for label, points in sorted(grouped.items())])


def over_time(history: Sequence[MetricSeries], name: str, title: str, y_label: str) -> Plot | None:
    """A trend chart: metric `name` per run, one series per label set (the first MAX_TREND_SERIES)."""
    return _over_time([s for s in history if s.name == name], title, y_label)


def _over_time(named: Sequence[MetricSeries], title: str, y_label: str) -> Plot | None:
    """over_time of the series of one metric name."""
    chosen = [s for s in named if s.points]
    if not chosen:
        return None
    shown = chosen[:MAX_TREND_SERIES]
    marks = sorted(dict.fromkeys(mark for s in named for mark in s.marks))
    return Plot(title=title, x_label="run started (UTC)", y_label=y_label, x_kind="time",
                series=[PlotSeries(label_text(s.labels) or s.name, s.points) for s in shown],
                y_unit=shown[0].unit or "", omitted_series=len(chosen) - len(shown), marks=marks)


def _note_values(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> str:
    """A one-line summary of scalar results (e.g. the McNemar p) shown under a chart."""
    parts = []
    for row in rows:
        if row["name"] in names and _finite(row.get("value")):
            where = label_text(row.get("labels"))
            interval = (f" [{row['ci_low']:.3g} .. {row['ci_high']:.3g}]"
                        if _finite(row.get("ci_low")) and _finite(row.get("ci_high")) else "")
            parts.append(f"{row['name']}{f' ({where})' if where else ''} = {row['value']:.4g}{interval}")
    return "; ".join(parts)


def draw(chart: Chart, latest: Sequence[dict[str, Any]], history: Sequence[MetricSeries]) -> Plot | None:
    """A probe's declared chart (prober/core/declarations.py) as a Plot, None when nothing of it is there."""
    rows = chart.rows if chart.rows is not None else latest
    if chart.kind == "trend" or chart.x is None:    # (Chart refuses any other kind without an x)
        return over_time(history, chart.metrics[0], chart.title, chart.y_label)
    if chart.kind == "categories":
        plot = categories(rows, chart.metrics[0], chart.x, chart.title, chart.y_label)
    else:
        plot = versus(rows, chart.metrics, chart.x, chart.title, chart.y_label, chart.x_label, chart.series_by)
    if plot is not None and chart.note_metrics:
        plot.note = _note_values(rows, chart.note_metrics)
    return plot


def suite_plots(probe: str, latest: Sequence[dict[str, Any]], history: Sequence[MetricSeries]) -> list[Plot]:
    """The charts probe `probe` declares, drawn from its latest metric rows and their history; none
    for a probe that is not installed."""
    declared = find_probe(probe)
    charts = declared.charts(latest) if declared is not None else []
    return [plot for chart in charts if (plot := draw(chart, latest, history)) is not None]


def trend_plots(history: Sequence[MetricSeries]) -> list[Plot]:
    """One trend chart per metric name that has a value in at least one run."""
    named: dict[str, list[MetricSeries]] = defaultdict(list)     # (grouped once: a probe has dozens of names)
    for series in history:
        named[series.name].append(series)
    return [plot for name, group in named.items() if (plot := _over_time(group, name, name)) is not None]
