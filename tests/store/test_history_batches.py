"""The store's history in batches (sample_history_batches, metric_history_batches), what the exports
read: every row once, oldest run first and by id within a run, in batches of at most _SAMPLE_BATCH;
with json_text the samples' JSON objects and arrays as the text stored and their scalars decoded,
the metrics' JSON all as text; the dict readers (iter_*_history) the same rows."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import sqlalchemy as sa

from prober.core.records import Metric, Run
from prober.store import Store
from prober.store import store as store_module
from prober.store.schema import samples

NOW = dt.datetime(2026, 6, 1, 2, tzinfo=dt.UTC)
JSON_VALUES = [{"b": 1, "a": [1, 2]}, [1, "x"], "a string", 7, None, True]


def _sample(run_id: str, target: str, index: int, started: dt.datetime) -> dict:
    value = JSON_VALUES[index % len(JSON_VALUES)]
    return {"run_id": run_id, "target": target, "probe": "latency", "case": "c", "labels": {"i": index},
            "request_index": index, "attempt": 1, "final": True, "protocol": "openai", "url": "http://x",
            "request_body": value, "tool_calls": value, "stream": True, "output_sha256": "s", "output_chars": 1,
            "output_truncated": False, "started_at": started}


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "_SAMPLE_BATCH", 7)
    opened = Store.open(f"sqlite:///{tmp_path / 'prober.db'}")
    rows = []
    for day, run_id in ((2, "older"), (1, "newer")):       # written newest first: ids do not follow time
        started = NOW - dt.timedelta(days=day)
        opened.create_run(Run(id=run_id, suite="s", started_at=started, prober_version="t", config_hash="x",
                              host="h", pid=1, targets=["a", "b"]))
        rows += [_sample(run_id, "ab"[index % 2], index, started) for index in range(20)]
    rows.sort(key=lambda row: row["run_id"] != "newer")
    with opened.engine.begin() as conn:
        conn.execute(samples.insert(), rows)
    opened.write_metrics([Metric(run_id, "a", "latency", f"m{index}", float(index), {"i": index}, None, None, 3,
                                 "ms") for run_id in ("older", "newer") for index in range(10)])
    yield opened
    opened.close()


@pytest.mark.unit
def test_sample_batches_hold_every_row_in_order_with_json_scalars_decoded(store: Store) -> None:
    batches = list(store.sample_history_batches(json_text=True))
    assert batches and all(0 < len(rows) <= 7 for _, rows in batches)
    names = batches[0][0]
    rows = [dict(zip(names, row, strict=True)) for _, batch in batches for row in batch]
    assert [row["run_id"] for row in rows] == ["older"] * 20 + ["newer"] * 20
    ids = [row["id"] for row in rows]
    assert ids[:20] == sorted(ids[:20]) and ids[20:] == sorted(ids[20:])
    decoded = store.sample_history()
    assert [row["id"] for row in decoded] == ids
    for text_row, row in zip(rows, decoded, strict=True):
        for name in ("request_body", "tool_calls"):
            if isinstance(row[name], (dict, list)):
                assert isinstance(text_row[name], str) and json.loads(text_row[name]) == row[name]
            else:
                assert text_row[name] == row[name]                 # a scalar decoded, None kept
    assert list(store.iter_sample_history(json_text=True)) == rows


@pytest.mark.unit
def test_sample_batches_filter_by_window_run_and_target(store: Store) -> None:
    def ids(**filters) -> list[int]:
        return [row[0] for _, batch in store.sample_history_batches(**filters) for row in batch]

    assert len(ids(since=NOW - dt.timedelta(days=1, hours=1))) == 20
    assert len(ids(run_id="older")) == 20 and len(ids(target="a")) == 20 and len(ids(run_id="newer", target="b")) == 10
    with store.engine.connect() as conn:
        held = set(conn.execute(sa.select(samples.c.id).where(samples.c.target == "a")).scalars())
    assert set(ids(target="a")) == held


@pytest.mark.unit
def test_metric_batches_with_json_text(store: Store) -> None:
    batches = list(store.metric_history_batches(json_text=True))
    names = batches[0][0]
    rows = [dict(zip(names, row, strict=True)) for _, batch in batches for row in batch]
    assert [row["run_id"] for row in rows] == ["older"] * 10 + ["newer"] * 10
    assert all(isinstance(row["labels"], str) for row in rows)
    assert [json.loads(row["labels"]) for row in rows] == [row["labels"] for row in store.metric_history()]
