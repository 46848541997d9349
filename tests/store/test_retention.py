"""Retention (prober/store/retention.py): samples, or only their output text, of finished runs older than
a cutoff go; runs, metrics and running runs stay; SQLite gives the space back."""

from __future__ import annotations

import datetime as dt
import os
import socket
import sqlite3
import uuid
from pathlib import Path

import pytest

from prober.core.records import Exchange, Run, Sample
from prober.store import Store
from tests.support.history import T0, add_run, latency_samples
from tests.support.postgres import create_database, postgres_url  # noqa: F401


@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.unit),
                        pytest.param("postgresql", marks=pytest.mark.infra)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'prober.db'}"
    return create_database(request.getfixturevalue("postgres_url"), f"t_{uuid.uuid4().hex[:12]}")


def _night(store: Store, run_id: str, night: int, samples: int = 20) -> None:
    add_run(store, run_id, night, [{"name": "ttft_p50_ms", "value": 20.0, "n": samples, "unit": "ms"}])
    latency_samples(store, run_id, [20.0] * samples)


def _counts(store: Store, run_id: str) -> tuple[int, int, int]:
    rows = store.samples(run_id)
    return len(rows), sum(row["output_text"] is not None for row in rows), len(store.metrics(run_id))


def test_prune_drops_old_samples_and_keeps_runs_metrics_and_running_runs(store_url: str) -> None:
    store = Store.open(store_url)
    try:
        _night(store, "old", 0)
        _night(store, "recent", 40)
        # started as long ago as "old", still writing: never touched
        store.create_run(Run(id="live", suite="latency", started_at=T0, prober_version="test", config_hash="h",
                             host=socket.gethostname(), pid=os.getpid(), targets=["emu"]))
        latency_samples(store, "live", [20.0] * 5)

        result = store.prune(samples_before=T0 + dt.timedelta(days=10), outputs_before=T0 + dt.timedelta(days=50))

        assert _counts(store, "old") == (0, 0, 1)               # samples gone, metric kept
        assert _counts(store, "recent") == (20, 0, 1)           # only the output text went
        assert _counts(store, "live") == (5, 5, 0)
        assert all(row["output_sha256"] and row["output_chars"] for row in store.samples("recent"))
        assert {run["id"] for run in store.list_runs()} == {"old", "recent", "live"}
        assert (result.samples_deleted, result.outputs_cleared, result.runs_pruned) == (20, 20, 2)
        assert store.get_run("old")["sample_count"] == 0
        # again: nothing left to do
        assert store.prune(samples_before=T0 + dt.timedelta(days=10)).samples_deleted == 0
    finally:
        store.close()


def _big_night(store: Store, run_id: str, night: int) -> None:
    add_run(store, run_id, night, [])
    with store.sample_writer() as writer:
        for index in range(300):
            exchange = Exchange(protocol="anthropic", url="http://emulator/v1/messages", request_body={},
                                request_headers={}, started_at=T0, start_ns=0, status=200,
                                text=f"{index} " + os.urandom(2000).hex())
            writer.submit(Sample(run_id=run_id, target="emu", probe="latency", case="c", labels={},
                                 exchange=exchange, request_index=index))


@pytest.mark.unit
def test_sqlite_space_comes_back_also_in_a_store_made_before_incremental_vacuum(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:        # a store as older versions made it: no auto-vacuum
        conn.execute("PRAGMA auto_vacuum = NONE")
        conn.execute("CREATE TABLE placeholder (x)")
    store = Store.open(f"sqlite:///{path}")
    try:
        for night in range(4):
            _big_night(store, f"n{night}", night)
        before = store.size_bytes()
        first = store.prune(samples_before=T0 + dt.timedelta(days=3))     # most of the file: VACUUM
        after_first = store.size_bytes()
        for night in range(4, 20):
            _big_night(store, f"n{night}", night)
        grown = store.size_bytes()
        second = store.prune(samples_before=T0 + dt.timedelta(days=4))    # one night of 17: a daily prune
        after_second = store.size_bytes()
    finally:
        store.close()
    assert first.samples_deleted == 900 and first.reclaimed == "VACUUM"
    assert after_first < 0.5 * before, (before, after_first)
    assert second.samples_deleted == 300 and second.reclaimed == "incremental vacuum"
    assert after_second < 0.97 * grown, (grown, after_second)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2     # incremental from the first VACUUM on
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
