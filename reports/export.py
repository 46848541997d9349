"""`prober export --format csv|parquet`: samples and metrics as tables for pandas, spreadsheets and
warehouses. One file each: samples.<ext> and metrics.<ext>, with the run's suite on every row.

JSON columns (labels, usage, request bodies, ...) are written as JSON text: their keys differ from
row to row, and text reads back the same from CSV and Parquet alike (`json.loads` it).
Timestamps are UTC, timezone-aware.
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


def _frame(rows: list[dict[str, Any]]) -> "pandas.DataFrame":
    import pandas as pd

    frame = pd.DataFrame(rows)
    for column in frame.columns:
        if any(isinstance(value, (dict, list)) for value in frame[column]):
            frame[column] = [None if value is None else json.dumps(value, sort_keys=True) for value in frame[column]]
    return frame


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
            frame.to_csv(path, index=False)
        else:
            frame.to_parquet(path, index=False)
        written.append(path.resolve())
    return written
