"""What a probe declares about its results beyond the metric rows, so that the report and the drift
tests treat them right without knowing any probe: which charts show them, which stored samples are
worth a human look, and how its metrics form families judged night by night.

A probe class fills these in (prober/probes/base.py); prober/reports/ and the drift tests find them through the
registry (prober/core/probe_registry.py) by the probe name stored with every row, so a probe from
another package is drawn and judged like a built-in one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from prober.core.records import SampleRow

# A share of n trials (value * n successes, Wilson interval); a latency-like quantity judged on the
# log scale; a paired comparison read from its discordant counts; or a value with no per-run
# distribution to test (a count, a cost, a difference of two shares), left to SLO rules.
FamilyKind = Literal["share", "latency", "paired", "other"]


@dataclass(frozen=True)
class MetricFamily:
    """One quantity the drift tests judge with one value per run.

    `name` is what an alert names. A family reads the metric rows named in `metrics` (the metric
    called `name` when empty): latency's family "ttft_ms" reads its "ttft_p50_ms" rows. The cells
    of one run (a row per label set) are pooled into the run's value over the probe's
    `pooled_labels`, or over every label with `pool_every_label`."""

    name: str
    kind: FamilyKind
    # +1: a rise is a regression, -1: a fall is; 0: moves are notices, never pages (no agreed bad
    # direction, or a mirror of a family that pages for it).
    bad_direction: Literal[-1, 0, 1] = 0
    metrics: tuple[str, ...] = ()
    pool_every_label: bool = False

    def reads(self, metric: str) -> bool:
        return metric in (self.metrics or (self.name,))


ChartKind = Literal["versus", "categories", "trend"]


@dataclass(frozen=True)
class Chart:
    """A chart a probe wants in its report section, as data (prober/reports/plots.py draws it).

    "versus": `metrics` of the latest run against the numeric label `x`, one series per remaining
    label set, or per value of the `series_by` labels with the shares of cells on one series and x
    pooled. "categories": the first metric for each value of the label `x` (a schema variant).
    "trend": the first metric per run over the report's window, one series per label set.
    `note_metrics`: scalar results (a p-value) written under the chart. `rows`: metric rows to
    draw instead of the latest run's, for a chart of rows the probe derives from them."""

    kind: ChartKind
    title: str
    y_label: str
    metrics: tuple[str, ...]
    x: str | None = None
    x_label: str | None = None
    series_by: tuple[str, ...] | None = None
    note_metrics: tuple[str, ...] = ()
    rows: Sequence[Mapping[str, Any]] | None = None

    def __post_init__(self) -> None:
        # A probe's mistake is refused where the chart is declared, not drawn as an empty chart.
        if not self.metrics:
            raise ValueError(f"chart {self.title!r}: no metrics")
        if self.kind != "trend" and self.x is None:
            raise ValueError(f"chart {self.title!r}: a {self.kind} chart needs the label on its x axis (x=...)")


@dataclass(frozen=True)
class NotableSample:
    """A stored sample a probe finds worth a human look: `why` in a few words, and the `text` to
    show (the output, or the part of it the probe judged). The text is untrusted model output."""

    row: SampleRow
    why: str
    text: str | None
