"""`prober export --format csv|parquet`: samples and metrics as tables for pandas, spreadsheets and
warehouses. One file each: samples.<ext> and metrics.<ext>, with the run's suite on every row.
Written without pandas, which the core install leaves out: CSV by the csv module, Parquet by
pyarrow (the parquet extra).

JSON columns (labels, usage, request bodies, ...) are written as JSON text: their keys differ from
row to row, and text reads back the same from CSV and Parquet alike (`json.loads` it). CSV gets
the samples' JSON text as stored (a week of a fleet's samples is half a million JSON cells: they
are not decoded to be encoded again).
Timestamps are UTC, timezone-aware.

CSV is opened by spreadsheets, which run a cell starting with `=`, `+`, `-` or `@` (or a tab or
carriage return before one) as a formula: an endpoint's output of `=HYPERLINK(...)` would become
a live link. In CSV such a text cell gets a leading `'` (OWASP's advice; spreadsheets hide it and
show the text). Numbers are left alone, and Parquet, which no spreadsheet evaluates, keeps every
text exactly as stored.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from prober.core.extras import require_extra
from prober.store import Store

TABLE_FORMATS = ("csv", "parquet")
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text, never runs as a formula."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def _columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The rows as columns (every key of every row, first seen first), JSON columns as JSON text."""
    names = dict.fromkeys(key for row in rows for key in row)
    columns = {name: [row.get(name) for row in rows] for name in names}
    for name, values in columns.items():
        if any(isinstance(value, (dict, list)) for value in values):
            columns[name] = [None if value is None else json.dumps(value, sort_keys=True) for value in values]
    return columns


def _csv_cell(value: Any) -> Any:
    # An empty cell for both None and NaN, as pandas writes and reads them.
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return spreadsheet_safe(value)


def _write_parquet(columns: dict[str, list[Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path)


def _csv_row(row: dict[str, Any], names: list[str]) -> list[Any]:
    """_csv_cell of each value (a dict or list as JSON text), without a call per plain cell: a week
    of a fleet's samples is two million cells."""
    cells: list[Any] = []
    for name in names:
        value = row.get(name)
        if value is None:
            cells.append("")
        elif isinstance(value, str):
            cells.append(spreadsheet_safe(value))
        elif isinstance(value, (dict, list)):
            cells.append(_csv_cell(json.dumps(value, sort_keys=True)))
        else:
            cells.append(_csv_cell(value))
    return cells


def _stream_csv(rows: Iterable[dict[str, Any]], path: Path) -> None:
    """Rows straight to CSV as they are read (every row of a table has the same keys): the samples
    of a week of a fleet never sit in memory at once."""
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        names: list[str] | None = None
        for row in rows:
            if names is None:
                names = list(row)
                writer.writerow(names)
            writer.writerow(_csv_row(row, names))


def export_tables(store: Store, fmt: str, out_dir: Path, *, since: dt.datetime | None = None,
                  run_id: str | None = None, target: str | None = None) -> list[Path]:
    """Write samples.<fmt> and metrics.<fmt> into out_dir; the paths written."""
    if fmt == "parquet":
        require_extra("pyarrow", "parquet", "Parquet export needs")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    tables: tuple[tuple[str, Callable[[], Iterable[dict[str, Any]]]], ...] = (
        ("samples", lambda: store.iter_sample_history(since=since, run_id=run_id, target=target,
                                                         json_text=fmt == "csv")),
        ("metrics", lambda: store.metric_history(since=since, run_id=run_id, target=target)))
    for name, read in tables:
        path = out_dir / f"{name}.{fmt}"
        if fmt == "csv":
            _stream_csv(read(), path)
        else:
            _write_parquet(_columns(list(read())), path)
        written.append(path.resolve())
    return written
