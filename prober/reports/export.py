"""`prober export --format csv|parquet`: samples and metrics as tables for pandas, spreadsheets and
warehouses. One file each: samples.<ext> and metrics.<ext>, with the run's suite on every row.
Written without pandas, which the core install leaves out: CSV by the csv module, Parquet by
pyarrow (the parquet extra). Both stream: rows are read a run at a time and written as they come
(Parquet in row groups of PARQUET_BATCH_ROWS, its schema fixed from the store's column kinds), so
memory holds a batch whatever the window (a month of a fleet's samples is gigabytes as objects).

JSON columns (labels, usage, request bodies, ...) are written as JSON text: their keys differ from
row to row, and text reads back the same from CSV and Parquet alike (`json.loads` it). Both get
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


def _csv_cell(value: Any) -> Any:
    # An empty cell for both None and NaN, as pandas writes and reads them.
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return spreadsheet_safe(value)


# Rows per Parquet row group: a few MB of samples in memory at a time, however long the window.
PARQUET_BATCH_ROWS = 2000


def _arrow_schema(kinds: dict[str, str]) -> Any:
    """The file's schema from the store's column kinds, fixed before the first row (a batch whose
    column happens to be all None must not make it a column of nulls)."""
    import pyarrow as pa

    types = {"text": pa.string(), "json": pa.string(), "int": pa.int64(), "float": pa.float64(),
             "bool": pa.bool_(), "time": pa.timestamp("us", tz="UTC")}
    return pa.schema([(name, types[kind]) for name, kind in kinds.items()])


def _json_text(value: Any) -> Any:
    """A JSON column's cell as JSON text: read as text already (json_text) or decoded (metrics)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def _stream_parquet(rows: Iterable[dict[str, Any]], kinds: dict[str, str], path: Path) -> None:
    """Rows to Parquet a row group at a time: memory holds one batch, not the window."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _arrow_schema(kinds)
    json_names = {name for name, kind in kinds.items() if kind == "json"}

    def write(writer: Any, batch: list[dict[str, Any]]) -> None:
        # column by column: a list per column and one pyarrow conversion each, not a call per cell
        arrays = []
        for field in schema:
            values = [row.get(field.name) for row in batch]
            if field.name in json_names:
                values = [value if value is None or isinstance(value, str) else _json_text(value) for value in values]
            arrays.append(pa.array(values, type=field.type))
        writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))

    with pq.ParquetWriter(path, schema) as writer:
        batch: list[dict[str, Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= PARQUET_BATCH_ROWS:
                write(writer, batch)
                batch = []
        if batch:
            write(writer, batch)


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
        ("samples", lambda: store.iter_sample_history(since=since, run_id=run_id, target=target, json_text=True)),
        ("metrics", lambda: store.iter_metric_history(since=since, run_id=run_id, target=target)))
    for name, read in tables:
        path = out_dir / f"{name}.{fmt}"
        if fmt == "csv":
            _stream_csv(read(), path)
        else:
            _stream_parquet(read(), store.history_columns(name), path)
        written.append(path.resolve())
    return written
