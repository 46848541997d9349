"""Text and tables for the terminal: stored or endpoint-supplied text made inert, and tables that fit
the console (80 columns when that is all there is) without cutting a value."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Column

from prober.commands.plain_table import PlainColumn, render_table
from prober.core.controlchars import escape_controls
from prober.core.redact import redact_text
from prober.core.stats import FLAG_NOTES, PERCENTILE_INTERVAL_NOTE

# Next to a flagged value (a percentile too poorly estimated to judge); the legend says why.
FLAG_MARKER = "!"


def inert(value: Any) -> str:
    """Stored or endpoint-supplied text to be written raw (a plain_table cell): secrets masked,
    control characters escaped (prober/core/controlchars.py)."""
    return escape_controls(redact_text(str(value)))


def print_inert(console: Console, lines: Sequence[Any]) -> None:
    """Stored or endpoint-supplied lines, each whole however long, made `inert` and written as they
    are (console.out: no markup to parse, no wrapping or highlighting): `print(shown(line),
    soft_wrap=True)` without rich's per-line markup and layout work (a fleet's `prober show`
    prints hundreds)."""
    if lines:
        console.out("\n".join(inert(line) for line in lines), highlight=False)


def shown(value: Any) -> str:
    """Stored or endpoint-supplied text for rich (a table cell or a line): `inert`, and rich markup
    inert too."""
    return escape(inert(value))


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def text_column(header: str) -> Column:
    """A column of words (labels, names, reasons): wraps, and folds a word longer than the column,
    so the table fits the console and no text is cut."""
    return Column(header, overflow="fold")


def value_column(header: str) -> Column:
    """A column of numbers or short codes: never wrapped, never shrunk below its content."""
    return Column(header, no_wrap=True, justify="right")


# print_metrics' columns (plain_table: a run of a fleet prints too many rows for rich's tables).
_METRIC_COLUMNS = (PlainColumn("labels", wraps=True), PlainColumn("metric", wraps=True),
                   PlainColumn("value", wraps=False), PlainColumn("95% CI", wraps=False),
                   PlainColumn("n", wraps=False), PlainColumn("unit", wraps=True))


def print_metrics(console: Console, metrics: Sequence[Any], title: str) -> None:
    """One table per target and probe (metrics are prober.core.records.Metric), rows grouped by their
    labels (e.g. concurrency); the legend of the flags shown under the tables."""
    from prober.reports.svg import interval_text

    console.print(shown(title))
    groups: dict[tuple[str, str], list[Any]] = {}
    for m in metrics:
        groups.setdefault((m.target, m.probe), []).append(m)
    tables = []
    for (target_name, probe_name), rows in groups.items():
        order = {name: i for i, name in enumerate(dict.fromkeys(m.name for m in rows))}

        def label_key(m: Any) -> list[tuple[str, str]]:
            return sorted((k, str(v).zfill(8)) for k, v in m.labels.items())

        cells = []
        for m in sorted(rows, key=lambda m: (label_key(m), order[m.name])):
            # a None label does not apply to the cell (a penalty baseline's penalty_value): not shown
            labels = ", ".join(f"{k}={v}" for k, v in sorted(m.labels.items()) if v is not None)
            value = fmt(m.value) + (f" {FLAG_MARKER}" if m.flags else "")
            cells.append((inert(labels), inert(m.name), value, interval_text(m.ci_low, m.ci_high, m.flags),
                          "" if m.n is None else str(m.n), inert(m.unit or "")))
        title = f"{inert(target_name)} / {inert(probe_name)}"
        tables.append(render_table(_METRIC_COLUMNS, cells, console.width, title))
    if tables:      # written as they are (console.out: no markup, wrapping or highlighting): the cells are inert
        console.out("\n".join(tables), highlight=False)
    flags = sorted({flag for m in metrics for flag in m.flags or []})
    for flag in flags:
        console.print(escape(f"{FLAG_MARKER} {flag}: {FLAG_NOTES.get(flag, 'never judged by an SLO or a drift test')}"))
    console.print(escape(PERCENTILE_INTERVAL_NOTE))
