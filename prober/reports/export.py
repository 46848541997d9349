"""`prober export --format csv|parquet`: samples and metrics as tables for pandas, spreadsheets and
warehouses. One file each: samples.<ext> and metrics.<ext>, with the run's suite on every row.
Written without pandas, which the core install leaves out: CSV by prober/reports/csv_text.py (the
bytes csv.writer writes, a column at a time), Parquet by pyarrow (the parquet extra). Both stream:
rows are read a run at a time, in batches handed over as columns (prober/store/export_reads.py reads
the driver's own rows: no dict, no Row per row), and written as they come (Parquet in row groups of
PARQUET_BATCH_ROWS, its schema fixed from the store's column kinds), so memory holds a batch
whatever the window (a month of a fleet's samples is gigabytes as objects).

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

import datetime as dt
import json
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from prober.core.extras import require_extra
from prober.reports.csv_text import csv_cell, csv_lines, csv_text
from prober.store import Store

TABLE_FORMATS = ("csv", "parquet")
# (column names, a batch as one sequence of values per column): what the store's *_export_columns yield.
Batches = Iterable[tuple[list[str], list[Sequence[Any]]]]


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


def _stream_parquet(batches: Batches, kinds: dict[str, str], path: Path, decoded: Collection[str] = ()) -> None:
    """Batches to Parquet a row group at a time: memory holds one group, not the window.
    `decoded`: as _stream_csv's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _arrow_schema(kinds)
    json_names = {name for name, kind in kinds.items() if kind == "json"}
    memo: dict[str | None, Any] = {}

    def write(writer: Any, names: list[str], columns: list[Sequence[Any]], count: int) -> None:
        # a list per column and one pyarrow conversion each, not a call per cell
        by_name = dict(zip(names, columns, strict=True))
        arrays = []
        for field in schema:
            values = by_name.get(field.name)
            if values is None:
                values = [None] * count
            elif field.name in decoded:
                values = _each_distinct(values, memo, _parquet_json)
            elif field.name in json_names and not set(map(type, values)) <= {str, type(None)}:
                values = [value if value is None or isinstance(value, str) else _json_text(value) for value in values]
            arrays.append(pa.array(values, type=field.type))
        writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))

    with pq.ParquetWriter(path, schema) as writer:
        for names, columns, count in _regrouped(batches, PARQUET_BATCH_ROWS):
            write(writer, names, columns, count)


def _regrouped(batches: Batches, size: int) -> Iterator[tuple[list[str], list[Sequence[Any]], int]]:
    """The rows of `batches` in groups of `size` (the last smaller), whatever size the store's were:
    (names, columns, rows)."""
    group: list[list[Any]] = []
    names: list[str] = []
    held = 0
    for names, columns in batches:
        if not columns or not len(columns[0]):
            continue
        if not group:
            group = [[] for _ in columns]
        for kept, values in zip(group, columns, strict=True):
            kept.extend(values)
        held += len(columns[0])
        while held >= size:
            yield names, [kept[:size] for kept in group], size
            group = [kept[size:] for kept in group]
            held -= size
    if held:
        yield names, list(group), held


def _stream_csv(batches: Batches, path: Path, decoded: Collection[str] = ()) -> None:
    """Batches straight to CSV as they are read (every batch of a table has the same columns): the
    samples of a week of a fleet never sit in memory at once. `decoded`: the columns read as JSON
    text that are written as their decoded values are (metrics' labels and flags, as sorted JSON)."""
    memo: dict[str | None, Any] = {}
    # UTF-8 bytes to a binary file, a batch a write: a text file's encoder cost three times as much
    # (for the same bytes: no newline translation either way)
    with path.open("wb") as file:
        header = False
        for names, columns in batches:
            if not header:
                file.write(csv_text([names]).encode())
                header = True
                converters = {index: partial(_each_distinct, memo=memo, convert=_csv_json)
                              for index, name in enumerate(names) if name in decoded}
            file.write(csv_lines(columns, converters).encode())


# Distinct JSON texts kept decoded and written (a fleet's label sets number hundreds): past this
# many, the memo starts again, so that a column of distinct texts cannot grow it with the window.
_MEMO_TEXTS = 10_000


def _each_distinct(texts: Sequence[str | None], memo: dict[str | None, Any],
                   convert: Callable[[str | None], Any]) -> list[Any]:
    """`convert` of each text, each distinct text converted once (memo keeps them)."""
    if len(memo) > _MEMO_TEXTS:
        memo.clear()
    for text in set(texts).difference(memo):
        memo[text] = convert(text)
    return list(map(memo.__getitem__, texts))


def _csv_json(text: str | None) -> str:
    """Stored JSON text as the CSV cell of its decoded value."""
    return csv_cell(None if text is None else json.loads(text))


def _parquet_json(text: str | None) -> Any:
    """Stored JSON text as Parquet's JSON cell of its decoded value (_json_text)."""
    return None if text is None else _json_text(json.loads(text))


def export_tables(store: Store, fmt: str, out_dir: Path, *, since: dt.datetime | None = None,
                  run_id: str | None = None, target: str | None = None) -> list[Path]:
    """Write samples.<fmt> and metrics.<fmt> into out_dir; the paths written."""
    if fmt == "parquet":
        require_extra("pyarrow", "parquet", "Parquet export needs")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    tables: tuple[tuple[str, Callable[[], Batches]], ...] = (
        ("samples", lambda: store.sample_export_columns(since=since, run_id=run_id, target=target)),
        ("metrics", lambda: store.metric_export_columns(since=since, run_id=run_id, target=target)))
    for name, read in tables:
        path = out_dir / f"{name}.{fmt}"
        # the metrics' JSON is read as the stored text (samples': objects and arrays only)
        kinds = store.history_columns(name)
        decoded = [column for column, kind in kinds.items() if kind == "json"] if name == "metrics" else []
        if fmt == "csv":
            _stream_csv(read(), path, decoded)
        else:
            _stream_parquet(read(), kinds, path, decoded)
        written.append(path.resolve())
    return written
