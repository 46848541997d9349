"""`prober export --format csv|parquet`: samples and metrics as tables for pandas, spreadsheets and
warehouses. One file each: samples.<ext> and metrics.<ext>, with the run's suite on every row.

JSON columns (labels, usage, request bodies, ...) are written as JSON text: their keys differ from
row to row, and text reads back the same from CSV and Parquet alike (`json.loads` it).
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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from store import Store

if TYPE_CHECKING:
    import pandas

TABLE_FORMATS = ("csv", "parquet")
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text, never runs as a formula."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def _frame(rows: list[dict[str, Any]]) -> pandas.DataFrame:
    import pandas as pd

    frame = pd.DataFrame(rows)
    for column in frame.columns:
        if any(isinstance(value, (dict, list)) for value in frame[column]):
            frame[column] = [None if value is None else json.dumps(value, sort_keys=True) for value in frame[column]]
    return frame


def _spreadsheet_safe(frame: pandas.DataFrame) -> pandas.DataFrame:
    safe = frame.copy()
    for column in safe.select_dtypes(include=["object", "string"]).columns:
        safe[column] = safe[column].map(spreadsheet_safe)
    return safe


def export_tables(store: Store, fmt: str, out_dir: Path, *, since: dt.datetime | None = None,
                  run_id: str | None = None, target: str | None = None) -> list[Path]:
    """Write samples.<fmt> and metrics.<fmt> into out_dir; the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, rows in (("samples", store.sample_history(since=since, run_id=run_id, target=target)),
                       ("metrics", store.metric_history(since=since, run_id=run_id, target=target))):
        frame = _frame(rows)
        path = out_dir / f"{name}.{fmt}"
        if fmt == "csv":
            _spreadsheet_safe(frame).to_csv(path, index=False)
        else:
            frame.to_parquet(path, index=False)
        written.append(path.resolve())
    return written
