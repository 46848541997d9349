"""A database error leaves every Store method as the store's own error (prober/store/errors.py),
by what SQLite itself says: the callers outside prober/store/ never see SQLAlchemy's types."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from prober.store import Store, StoreError, StoreNotADatabase, StoreReadOnly
from prober.store.errors import translate
from tests.store.test_store_roundtrip import make_run, make_sample, write_samples

pytestmark = pytest.mark.unit


def _store_with_samples(tmp_path: Path) -> Path:
    db = tmp_path / "p.db"
    with Store.open(f"sqlite:///{db}") as store:
        store.create_run(make_run("r1"))
        write_samples(store, [make_sample("r1", i) for i in range(40)])
    return db


def _garble_table(db: Path, table: str) -> None:
    """Overwrite the pages of `table` and its indexes with noise; the file's header stays valid."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = [page for (page,) in conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE tbl_name = ? AND rootpage > 0", (table,))]
    data = bytearray(db.read_bytes())
    rng = random.Random(5)
    for page in pages:
        data[(page - 1) * page_size:page * page_size] = bytes(rng.randrange(256) for _ in range(page_size))
    db.write_bytes(bytes(data))


def test_a_damaged_table_is_store_not_a_database_from_a_method_and_from_a_generator(tmp_path):
    db = _store_with_samples(tmp_path)
    _garble_table(db, "samples")
    with Store.open(f"sqlite:///{db}") as store:
        with pytest.raises(StoreNotADatabase) as raised:
            store.samples("r1")
        assert "malformed" in raised.value.reason and "SELECT" not in raised.value.reason
        assert isinstance(raised.value.__cause__, sa.exc.DBAPIError)   # the driver's error, for a traceback
        # A generator's queries run while it is iterated: translated there.
        rows = store.iter_sample_history()
        with pytest.raises(StoreNotADatabase):
            list(rows)
        assert store.run_entries("r1") == []   # the other tables still read


def test_a_missing_table_is_a_plain_store_error_with_the_drivers_first_line(tmp_path):
    db = _store_with_samples(tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE metrics")
    store = Store(sa.create_engine(f"sqlite:///{db}"))   # Store.open would recreate it
    try:
        with pytest.raises(StoreError) as raised:
            store.metrics("r1")
    finally:
        store.close()
    assert type(raised.value) is StoreError
    assert raised.value.reason == "no such table: metrics" == str(raised.value)


def test_a_write_to_a_read_only_database_is_store_read_only(tmp_path):
    db = _store_with_samples(tmp_path)
    store = Store(sa.create_engine(f"sqlite:///file:{db}?mode=ro&uri=true"))
    try:
        assert [run["id"] for run in store.list_runs()] == ["r1"]   # reads still work
        with pytest.raises(StoreReadOnly) as raised:
            store.create_run(make_run("r2"))
    finally:
        store.close()
    assert "readonly" in raised.value.reason


@pytest.mark.parametrize("message, kind", [
    ("database disk image is malformed", StoreNotADatabase),
    ("file is not a database", StoreNotADatabase),
    ("attempt to write a readonly database", StoreReadOnly),
    ("database is locked", StoreError),
])
def test_translate_goes_by_what_the_driver_says(message, kind):
    translated = translate(sa.exc.OperationalError("SELECT 1", {}, sqlite3.OperationalError(message)))
    assert type(translated) is kind and translated.reason == message
    # Only an operational error is a read-only store; another kind with the word is a plain one.
    other = translate(sa.exc.IntegrityError("INSERT", {}, sqlite3.IntegrityError("readonly column")))
    assert type(other) is StoreError
