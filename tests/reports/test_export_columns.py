"""What the exports read (prober/store/export_reads.py, through Store.sample_export_columns and
metric_export_columns) is what the typed history readers give, value for value and in order, on
SQLite and on PostgreSQL: the same rows as `sample_history_batches(json_text=True)` and
`metric_history_batches(json_text=True)`, as columns, in batches of at most the batch size, with
the same filters. Values a driver hands over raw (SQLite's text timestamps and 0/1 booleans,
PostgreSQL's timestamps in the session's zone, JSON scalars) are the cases that differ."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from prober.core.records import Metric, Run
from prober.store import Store, export_reads
from prober.store.schema import run_targets, samples
from tests.support.postgres import create_database

NOW = dt.datetime(2026, 6, 1, 2, tzinfo=dt.UTC)
JSON_VALUES = [{"b": 1, "a": [1, 2]}, [1, "x"], "a string", 7, None, True, 1.5, "=1+1", {}, []]
TEXTS = ['say "hi", then', "=HYPERLINK(1)", "é€😀", "", "line\nbreak", None]


def _sample(run_id: str, target: str, index: int, started: dt.datetime) -> dict:
    value = JSON_VALUES[index % len(JSON_VALUES)]
    return {"run_id": run_id, "target": target, "probe": "latency", "case": "c", "labels": {"i": index},
            "request_index": index, "attempt": 1, "final": index % 3 != 0, "protocol": "openai", "url": "http://x",
            "request_body": value, "tool_calls": value, "stream": index % 2 == 0, "output_sha256": "s",
            "output_chars": 1, "output_truncated": False, "output_text": TEXTS[index % len(TEXTS)],
            "ttft_ms": None if index % 4 == 0 else index * 1.25, "http_status": None if index % 5 == 0 else 200,
            "started_at": started + dt.timedelta(microseconds=0 if index % 2 else index * 1001)}


@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.unit),
                        pytest.param("postgresql", marks=pytest.mark.infra)])
def store(request, tmp_path, monkeypatch):
    monkeypatch.setattr(export_reads, "SAMPLE_BATCH", 7)
    monkeypatch.setattr(export_reads, "METRIC_BATCH", 4)
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'prober.db'}"
    else:
        url = create_database(request.getfixturevalue("postgres_url"), f"export_{uuid.uuid4().hex[:12]}")
    opened = Store.open(url)
    rows = []
    for day, run_id in ((2, "older"), (1, "newer")):       # written newest first: ids do not follow time
        started = NOW - dt.timedelta(days=day)
        opened.create_run(Run(id=run_id, suite="s", started_at=started, prober_version="t", config_hash="x",
                              host="h", pid=1, targets=["a", "b"], site=f"site-{day}"))
        rows += [_sample(run_id, "ab"[index % 2], index, started) for index in range(20)]
    rows.sort(key=lambda row: row["run_id"] != "newer")
    with opened.engine.begin() as conn:
        conn.execute(samples.insert(), rows)
        conn.execute(run_targets.insert(), [{"run_id": "newer", "target": "b", "status": "failed",
                                             "config_hash": "x"}])
    opened.write_metrics([Metric(run_id, "ab"[index % 2], "latency", f"m{index}", float(index) if index % 3 else None,
                                 {"i": index} if index % 4 else {}, None, 2.5, 3, "ms",
                                 flags=["low_n"] if index % 2 else None)
                          for run_id in ("older", "newer") for index in range(10)])
    opened.finish_run("older", "complete", NOW - dt.timedelta(days=2) + dt.timedelta(minutes=3))
    yield opened
    opened.close()


def _rows(batches) -> list[tuple]:
    found = []
    for names, columns in batches:
        assert len(names) == len(columns) and len({len(column) for column in columns}) == 1
        found += list(zip(*columns, strict=True))
    return found


def _typed(batches) -> list[tuple]:
    return [tuple(row) for _, rows in batches for row in rows]


@pytest.mark.parametrize("filters", [{}, {"since": NOW - dt.timedelta(days=1, hours=1)}, {"run_id": "older"},
                                     {"target": "a"}, {"run_id": "newer", "target": "b"}], ids=repr)
def test_sample_columns_are_the_typed_rows(store: Store, filters: dict) -> None:
    batches = list(store.sample_export_columns(**filters))
    assert batches and all(0 < len(columns[0]) <= 7 for _, columns in batches)
    assert batches[0][0] == next(iter(store.sample_history_batches(json_text=True)))[0]
    expected = _typed(store.sample_history_batches(json_text=True, **filters))
    found = _rows(batches)
    assert found == expected and len(found) > 0
    for row, typed in zip(found, expected, strict=True):          # equal and of the same types too
        assert [type(value) for value in row] == [type(value) for value in typed]
        assert [str(value) for value in row] == [str(value) for value in typed]   # the zone's text too


@pytest.mark.parametrize("filters", [{}, {"since": NOW - dt.timedelta(days=1, hours=1)}, {"run_id": "older"},
                                     {"target": "b"}], ids=repr)
def test_metric_columns_are_the_typed_rows(store: Store, filters: dict) -> None:
    batches = list(store.metric_export_columns(**filters))
    assert all(0 < len(columns[0]) <= 4 for _, columns in batches)
    names = batches[0][0]
    assert names == next(iter(store.metric_history_batches(json_text=True)))[0]
    expected = _typed(store.metric_history_batches(json_text=True, **filters))
    found = _rows(batches)
    assert found == expected and len(found) > 0
    for row, typed in zip(found, expected, strict=True):
        assert [type(value) for value in row] == [type(value) for value in typed]
        assert [str(value) for value in row] == [str(value) for value in typed]
    statuses = {(row[names.index("run_id")], row[names.index("target")]): row[names.index("run_status")]
                for row in found}
    assert statuses.get(("newer", "b"), "failed") == "failed" and statuses.get(("newer", "a"), "running") == "running"


@pytest.mark.unit
def test_a_database_error_leaves_as_the_stores_error(tmp_path) -> None:
    # the column reads run the driver's SQL on its own cursor: its errors still become StoreError
    from prober.store import StoreError

    opened = Store.open(f"sqlite:///{tmp_path / 'prober.db'}")
    try:
        opened.create_run(Run(id="r", suite="s", started_at=NOW, prober_version="t", config_hash="x", host="h",
                              pid=1, targets=["a"]))
        with opened.engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE samples RENAME TO samples_gone")
        with pytest.raises(StoreError, match="no such table: samples"):
            list(opened.sample_export_columns())
        with opened.engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE metrics RENAME TO metrics_gone")
        with pytest.raises(StoreError, match="no such table: metrics"):
            list(opened.metric_export_columns())
    finally:
        opened.close()
