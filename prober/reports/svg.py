"""Draw a `prober.reports.plots.Plot` as inline SVG: no scripts, no fonts or styles fetched, nothing but
shapes and escaped text, so that an HTML report stays one self-contained, inert file.

Every point carries a <title> (a hover tooltip in browsers) with its exact value and interval. An
open trend also draws its guides (prober/reports/trend_guides.py): the baseline band, SLO thresholds
and the marks where alerts paged. A compact chart (a folded trend) draws each series as a line
with one tooltip, no mark per point: a fleet's report holds thousands of folded trends, and their
points' marks were most of its bytes and of the time spent drawing it.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Iterable
from html import escape

from prober.core.stats import INTERVAL_UNBOUNDED
from prober.reports.plots import Plot, Point

WIDTH, PLOT_HEIGHT, COMPACT_HEIGHT = 680, 260, 120
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 12, 44
LEGEND_ROW = 16
BAND_COLOR, LEVEL_COLOR, PAGE_COLOR = "#2ca02c", "#7f7f7f", "#e67e00"
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) < 1e-9:
        return "0"   # a Wilson bound of 2.8e-17 is zero, written by floating point
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def interval_text(low: float | None, high: float | None, flags: list[str] | None) -> str:
    """A 95% interval as text; a side the sample could not bound reads "unbounded"."""
    if low is None and high is None:
        return "unbounded" if flags and INTERVAL_UNBOUNDED in flags else ""   # not for client_limited alone
    return f"{'unbounded' if low is None else fmt(low)} .. {'unbounded' if high is None else fmt(high)}"


def _nice_step(span: float, count: int = 4) -> float:
    raw = span / count
    magnitude: float = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10 * magnitude


def _y_range(plot: Plot) -> tuple[float, float]:
    values = [v for s in plot.series for p in s.points for v in ((p.y,) if plot.compact else (p.y, p.low, p.high))
              if v is not None and math.isfinite(v)]
    values += [v for v in (plot.band.low, plot.band.high) if math.isfinite(v)] if plot.band else []
    values += [v for v, _ in plot.levels if math.isfinite(v)]
    low, high = min(values), max(values)
    if low >= 0:
        low = 0.0   # rates, latencies and counts read best from zero
    if high == low:
        high = low + (abs(low) or 1.0)
    step = _nice_step(high - low)
    return math.floor(low / step) * step, math.ceil(high / step) * step


class _XScale:
    """Maps x values (numbers, times or category names) to pixels, and says where the ticks go."""

    def __init__(self, plot: Plot, left: float, right: float) -> None:
        self.kind = plot.x_kind
        xs = [p.x for s in plot.series for p in s.points] + [x for x, _ in plot.marks] + [x for x, _ in plot.pages]
        xs += [plot.band.start] if plot.band else []
        if self.kind == "category":
            self.categories = list(dict.fromkeys(str(x) for x in xs))
        # (a chart's series share their runs' times: each distinct x is mapped once)
        self.values = sorted({self._raw(x) for x in dict.fromkeys(xs)})
        low, high = self.values[0], self.values[-1]
        if high == low:
            pad = 3600.0 if self.kind == "time" else 1.0
            low, high = low - pad, high + pad
        if self.kind == "category":
            low, high = -0.5, len(self.categories) - 0.5
        self.low, self.high, self.left, self.right = low, high, left, right
        self._pixels: dict[float | str | dt.datetime, float] = {}

    def _raw(self, x: float | str | dt.datetime) -> float:
        if self.kind == "category":
            return float(self.categories.index(str(x)))
        if isinstance(x, dt.datetime):          # kind "time"
            return x.timestamp()
        if isinstance(x, str):
            return float(x)
        return math.log2(x) if self.kind == "log2" else float(x)

    def __call__(self, x: float | str | dt.datetime) -> float:
        return self.left + (self._raw(x) - self.low) / (self.high - self.low) * (self.right - self.left)

    def pixels(self, xs: Iterable[float | str | dt.datetime]) -> list[float]:
        """The pixel of each x, each distinct x of the chart computed once."""
        memo = self._pixels
        return [memo[x] if x in memo else memo.setdefault(x, self(x)) for x in xs]

    def ticks(self) -> list[tuple[float, str]]:
        """(pixel, label) pairs."""
        if self.kind == "category":
            return [(self(name), name) for name in self.categories]
        if self.kind == "time":
            chosen = self.values if len(self.values) <= 5 else [
                self.values[round(i * (len(self.values) - 1) / 4)] for i in range(5)]
            return [(self._pixel(v), dt.datetime.fromtimestamp(v, dt.UTC).strftime("%m-%d %H:%M"))
                    for v in dict.fromkeys(chosen)]
        if len(self.values) <= 10:
            return [(self._pixel(v), fmt(2 ** v if self.kind == "log2" else v)) for v in self.values]
        step = _nice_step(self.high - self.low, 5)
        start = math.ceil(self.low / step) * step
        return [(self._pixel(v), fmt(2 ** v if self.kind == "log2" else v))
                for v in (start + i * step for i in range(int((self.high - start) / step) + 1))]

    def _pixel(self, raw: float) -> float:
        return self.left + (raw - self.low) / (self.high - self.low) * (self.right - self.left)


@functools.lru_cache(maxsize=4096)   # (a fleet's charts share their runs' times: 150,000 calls, a few thousand times)
def _tooltip_time(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M UTC")


def _tooltip(label: str, point: Point) -> str:
    x = _tooltip_time(point.x) if isinstance(point.x, dt.datetime) else \
        (fmt(point.x) if isinstance(point.x, (int, float)) else point.x)
    interval = f" [{fmt(point.low)} .. {fmt(point.high)}]" if point.low is not None and point.high is not None else ""
    note = f" {point.note}" if point.note else ""
    return f"{label}: {x} -> {fmt(point.y)}{interval}{note}"


def _series_summary(label: str, points: list[Point]) -> str:
    values = [p.y for p in points]
    return f"{label}: {len(values)} point(s), latest {fmt(values[-1])}, range {fmt(min(values))} .. {fmt(max(values))}"


def render(plot: Plot) -> str:
    """The chart as an <svg> element; every piece of text in it is escaped."""
    legend_rows = len(plot.series) + (1 if plot.band else 0) + len(plot.levels) + (1 if plot.pages else 0) + \
        (1 if plot.omitted_series else 0) + (1 if plot.marks else 0)
    plot_height = COMPACT_HEIGHT if plot.compact else PLOT_HEIGHT
    height = TOP + plot_height + BOTTOM + LEGEND_ROW * legend_rows
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, TOP, TOP + plot_height
    x_scale = _XScale(plot, x0 + 8, x1 - 8)
    y_low, y_high = _y_range(plot)

    def y_pixel(value: float) -> float:
        return y1 - (value - y_low) / (y_high - y_low) * (y1 - y0)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart{" compact" if plot.compact else ""}" '
             f'width="{WIDTH}" height="{height}" '
             f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(plot.title)}" '
             f'font-family="sans-serif" font-size="11">',
             f'<rect x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" fill="#fff" stroke="#999"/>']
    step = _nice_step(y_high - y_low)
    for i in range(round((y_high - y_low) / step) + 1):
        value = y_low + i * step
        y = y_pixel(value)
        parts.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text x="{x0 - 4}" y="{y + 4:.1f}" text-anchor="end">{escape(fmt(value))}</text>')
    for x, label in x_scale.ticks():
        parts.append(f'<line x1="{x:.1f}" y1="{y1}" x2="{x:.1f}" y2="{y1 + 4}" stroke="#999"/>'
                     f'<text x="{x:.1f}" y="{y1 + 16}" text-anchor="middle">{escape(label)}</text>')
    parts.append(f'<text x="{(x0 + x1) / 2}" y="{y1 + 34}" text-anchor="middle">{escape(plot.x_label)}</text>')
    parts.append(f'<text transform="translate(14,{(y0 + y1) / 2}) rotate(-90)" text-anchor="middle">'
                 f'{escape(plot.y_label)}</text>')

    # The guides under the points: the baseline's band from its first night to the right edge (where
    # tonight's points should be), SLO thresholds across, and where alerts paged.
    if plot.band:
        start, top, bottom = x_scale(plot.band.start), y_pixel(plot.band.high), y_pixel(plot.band.low)
        parts.append(f'<rect class="baseline-band" x="{start:.1f}" y="{top:.1f}" width="{x1 - start:.1f}" '
                     f'height="{max(bottom - top, 1.0):.1f}" fill="{BAND_COLOR}" fill-opacity="0.15" '
                     f'stroke="{BAND_COLOR}" stroke-opacity="0.5"><title>{escape(plot.band.label)}</title></rect>')
    for value, why in plot.levels:
        y = y_pixel(value)
        parts.append(f'<line class="slo-level" x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="{LEVEL_COLOR}" '
                     f'stroke-width="1.5" stroke-dasharray="6 3"><title>{escape(why)}</title></line>')
    for when, why in plot.pages:
        parts.append(f'<line class="page-mark" x1="{x_scale(when):.1f}" y1="{y0}" x2="{x_scale(when):.1f}" y2="{y1}" '
                     f'stroke="{PAGE_COLOR}" stroke-width="2"><title>{escape(why)}</title></line>')
    for when, why in plot.marks:     # a run that is not data (failed): marked where it happened, never a point
        parts.append(f'<line class="run-mark" x1="{x_scale(when):.1f}" y1="{y0}" x2="{x_scale(when):.1f}" y2="{y1}" '
                     f'stroke="#b00" stroke-dasharray="4 3"><title>{escape(_tooltip_time(when))} {escape(why)}'
                     f'</title></line>')

    # Series side by side at each x, so that their intervals do not hide each other; bands only
    # where they stay readable (overlapping bands of many series make one dark smear).
    offsets = [(i - (len(plot.series) - 1) / 2) * (6 if plot.x_kind == "category" else 3)
               for i in range(len(plot.series))]
    draw_bands = plot.x_kind != "category" and len(plot.series) <= 2 and not plot.compact
    for i, series in enumerate(plot.series):
        color = COLORS[i % len(COLORS)]
        points = [(x + offsets[i], p) for x, p in zip(x_scale.pixels(p.x for p in series.points), series.points,
                                                           strict=True)]
        bounded = [] if plot.compact else [(x, p.low, p.high) for x, p in points
                                           if p.low is not None and p.high is not None]
        if draw_bands and len(bounded) >= 2:
            outline = [f"{x:.1f},{y_pixel(high):.1f}" for x, _, high in bounded] + \
                      [f"{x:.1f},{y_pixel(low):.1f}" for x, low, _ in reversed(bounded)]
            parts.append(f'<polygon class="band" points="{" ".join(outline)}" fill="{color}" '
                         f'fill-opacity="0.15" stroke="none"/>')
        for x, low, high in bounded:
            parts.append(f'<line class="errorbar" x1="{x:.1f}" y1="{y_pixel(low):.1f}" x2="{x:.1f}" '
                         f'y2="{y_pixel(high):.1f}" stroke="{color}" stroke-width="1.5"/>')
        line_only = plot.compact and plot.x_kind != "category" and len(points) >= 2
        if plot.x_kind != "category" and len(points) >= 2:
            line = " ".join(f"{x:.1f},{y_pixel(p.y):.1f}" for x, p in points)
            title = f"<title>{escape(_series_summary(series.label, series.points))}</title>" if line_only else ""
            parts.append(f'<polyline class="series" points="{line}" fill="none" stroke="{color}" '
                         f'stroke-width="1.5">{title}</polyline>')
        for x, p in [] if line_only else points:      # (a compact chart's line is its series: no marks)
            parts.append(f'<circle class="point" cx="{x:.1f}" cy="{y_pixel(p.y):.1f}" r="3.5" fill="{color}">'
                         f'<title>{escape(_tooltip(series.label, p))}</title></circle>')
        legend_y = y1 + BOTTOM + LEGEND_ROW * i + 4
        parts.append(f'<rect x="{x0}" y="{legend_y}" width="10" height="10" fill="{color}"/>'
                     f'<text x="{x0 + 16}" y="{legend_y + 9}">{escape(series.label)}</text>')
    row = len(plot.series)
    if plot.band:
        legend_y = y1 + BOTTOM + LEGEND_ROW * row + 4
        parts.append(f'<rect x="{x0}" y="{legend_y}" width="10" height="10" fill="{BAND_COLOR}" fill-opacity="0.3"/>'
                     f'<text x="{x0 + 16}" y="{legend_y + 9}">{escape(plot.band.label)}</text>')
        row += 1
    for _, why in plot.levels:
        legend_y = y1 + BOTTOM + LEGEND_ROW * row + 4
        parts.append(f'<line x1="{x0}" y1="{legend_y + 5}" x2="{x0 + 10}" y2="{legend_y + 5}" stroke="{LEVEL_COLOR}" '
                     f'stroke-width="1.5" stroke-dasharray="3 2"/><text x="{x0 + 16}" y="{legend_y + 9}">'
                     f'{escape(why)}</text>')
        row += 1
    if plot.pages:
        legend_y = y1 + BOTTOM + LEGEND_ROW * row + 4
        shown = "; ".join(why for _, why in plot.pages[:2]) + (f" and {len(plot.pages) - 2} more"
                                                               if len(plot.pages) > 2 else "")
        parts.append(f'<line x1="{x0 + 5}" y1="{legend_y}" x2="{x0 + 5}" y2="{legend_y + 10}" stroke="{PAGE_COLOR}" '
                     f'stroke-width="2"/><text x="{x0 + 16}" y="{legend_y + 9}">{escape(shown)}</text>')
        row += 1
    if plot.omitted_series:
        legend_y = y1 + BOTTOM + LEGEND_ROW * row + 4
        parts.append(f'<text x="{x0}" y="{legend_y + 9}" fill="#666">{plot.omitted_series} more series not '
                     f'drawn (see prober history)</text>')
        row += 1
    if plot.marks:
        legend_y = y1 + BOTTOM + LEGEND_ROW * row + 4
        parts.append(f'<line x1="{x0 + 5}" y1="{legend_y}" x2="{x0 + 5}" y2="{legend_y + 10}" stroke="#b00" '
                     f'stroke-dasharray="4 3"/><text x="{x0 + 16}" y="{legend_y + 9}">run not complete '
                     f'(failed, interrupted or running): not plotted</text>')
    parts.append("</svg>")
    return "".join(parts)
