"""`prober history` over a long window: one row per week and series (min, median, max of the
nightly values) instead of a row per run, which over a year of a fleet is tens of thousands of
rows nobody reads and most of the command's time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from prober.commands.terminal import fmt, shown, text_column, value_column
from prober.reports.history import weekly


def print_weekly(console: Console, metric: str, rows: Sequence[dict[str, Any]]) -> None:
    weeks = weekly(rows)
    table = Table(Column("week of (UTC)", no_wrap=True), text_column("suite"), text_column("target"),
                  text_column("labels"), value_column("runs"), value_column("min"), value_column("median"),
                  value_column("max"), text_column("unit"), title=f"{shown(metric)}, per week")
    for week in weeks:
        runs = str(week.runs) + (f" ({week.not_complete} not complete)" if week.not_complete else "")
        table.add_row(week.week.isoformat(), shown(week.suite), shown(week.target), shown(week.labels), runs,
                      fmt(week.low), fmt(week.median), fmt(week.high), shown(week.unit or ""))
    console.print(table)
    console.print(escape(f"{len(rows)} values summarized as {len(weeks)} weekly rows (values of complete runs); "
                         "--all prints every run, --since narrows the window"))
