"""From the store URL to a SQLAlchemy engine, and the write transaction every write goes through.

SQLite is set up for several prober processes writing one file at once: WAL (readers never block
the writer), a busy timeout (a writer waits for the lock instead of failing), and BEGIN IMMEDIATE
for write transactions (the write lock is taken up front, so a transaction never has to upgrade a
read snapshot that another writer has made stale, the one case the busy timeout cannot help).
If "database is locked" still surfaces, `write_transaction` retries the whole transaction.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url

from prober.core.errors import ConfigError
from prober.core.extras import require_extra
from prober.store.coltypes import dumps_json

T = TypeVar("T")

URL_EXAMPLES = "sqlite:///path/to/prober.db or postgresql+psycopg://user@host:5432/dbname"
PG_CONNECT_TIMEOUT_S = 10
# How long a write keeps retrying a locked SQLite database (beyond the busy timeout) or a dropped
# PostgreSQL connection before it gives up and reports the error.
WRITE_RETRY_S = 300.0

_WRITE = "prober_store_write"   # execution option marking a write transaction


def redacted(url: str | sa.URL) -> str:
    """The URL for messages, without its password."""
    if isinstance(url, sa.URL):
        return url.render_as_string(hide_password=True)
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def open_engine(url: str, *, sqlite_busy_timeout: float = 30.0, create: bool = True) -> sa.Engine:
    """An engine for a store URL, checked by connecting; every problem is one ConfigError line.
    `create=False` (the commands that only read) refuses to make a new SQLite file: an empty store
    would answer with empty tables, which looks like "no runs" rather than "wrong path"."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"store url is empty; expected {URL_EXAMPLES}")
    try:
        parsed = make_url(url.strip())
    except (sa.exc.ArgumentError, ValueError):
        raise ConfigError(f"store url {redacted(url)!r} is not a database URL; expected {URL_EXAMPLES}") from None

    backend = parsed.get_backend_name()
    if backend == "postgres" or parsed.drivername == "postgresql":
        # psycopg 3 is the driver we ship; SQLAlchemy's default would be psycopg2.
        parsed = parsed.set(drivername="postgresql+psycopg")
        backend = "postgresql"
    if backend not in ("sqlite", "postgresql"):
        raise ConfigError(f"store url {redacted(parsed)!r}: unsupported database {backend!r}; "
                          f"expected {URL_EXAMPLES}")
    if parsed.drivername not in ("sqlite", "sqlite+pysqlite", "postgresql+psycopg"):
        raise ConfigError(f"store url {redacted(parsed)!r}: unsupported driver {parsed.drivername!r}; "
                          f"expected {URL_EXAMPLES}")
    if backend == "sqlite" and (not parsed.database or parsed.database == ":memory:"
                                or parsed.query.get("mode") == "memory"):
        raise ConfigError(f"store url {redacted(parsed)!r}: an in-memory SQLite database cannot be shared "
                          f"with the writer thread; give a file, e.g. sqlite:///prober.db")

    if backend == "sqlite" and not create and not Path(parsed.database or "").exists():
        raise ConfigError(f"no store at {redacted(parsed)}; run `prober run` first (or pass --db / set PROBER_DB)")
    if backend == "postgresql":
        require_extra("psycopg", "postgres", "PostgreSQL stores need")
    try:
        if backend == "sqlite":
            engine = sa.create_engine(parsed, json_serializer=dumps_json,
                                      connect_args={"timeout": sqlite_busy_timeout})
            _configure_sqlite(engine, sqlite_busy_timeout)
        else:
            connect_args = {} if "connect_timeout" in parsed.query else {"connect_timeout": PG_CONNECT_TIMEOUT_S}
            engine = sa.create_engine(parsed, json_serializer=dumps_json, pool_pre_ping=True,
                                      connect_args=connect_args)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError, TypeError) as exc:
        raise ConfigError(f"store url {redacted(parsed)!r}: {exc}") from None

    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except sa.exc.DBAPIError as exc:
        engine.dispose()
        reason = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
        raise ConfigError(f"store url {redacted(parsed)!r}: cannot open the database: {reason}") from None
    return engine


def _configure_sqlite(engine: sa.Engine, busy_timeout: float) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # SQLAlchemy emits BEGIN itself (see _on_begin), so the driver must not.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            # A new database frees pages that `prober prune` emptied a few at a time (incremental
            # vacuum) instead of needing a VACUUM that locks out writers; on a database that already
            # has tables this only takes effect at the next VACUUM (prober/store/retention.py runs one).
            cursor.execute("PRAGMA auto_vacuum = INCREMENTAL")
            _enable_wal(cursor, busy_timeout)
            # In WAL mode NORMAL survives any process crash (SIGKILL included); only a power loss
            # can take back the last commits.
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        immediate = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _enable_wal(cursor: sqlite3.Cursor, busy_timeout: float) -> None:
    # Switching a new database to WAL takes an exclusive lock and, unlike other statements, fails
    # at once with "database is locked" instead of waiting when another connection is doing the
    # same: two processes opening a new store together hit this. Wait here as the busy timeout would.
    deadline = time.monotonic() + max(busy_timeout, 5.0)
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL").fetchall()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(0.01)


def is_transient(exc: sa.exc.DBAPIError) -> bool:
    """A lock held by another writer, or a dropped connection: worth retrying the transaction."""
    if exc.connection_invalidated:
        return True
    message = str(exc.orig).lower()
    return any(text in message for text in ("database is locked", "database is busy", "database table is locked"))


def write_transaction(engine: sa.Engine, work: Callable[..., T], *args: Any, retry_for: float = WRITE_RETRY_S,
                      lock_wait: float | None = None) -> T:
    """Run `work(conn, *args)` in one write transaction, retrying it whole while the error is transient.
    `lock_wait`: on SQLite, how long one attempt waits for the write lock (default: the busy
    timeout the store was opened with), for a write that had better give up than wait long."""
    deadline = time.monotonic() + retry_for
    delay = 0.02
    while True:
        try:
            with engine.connect() as conn, _lock_wait(conn, lock_wait):
                conn.execution_options(**{_WRITE: True})
                with conn.begin():
                    return work(conn, *args)
        except sa.exc.DBAPIError as exc:
            if not is_transient(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


@contextlib.contextmanager
def _lock_wait(conn: sa.Connection, seconds: float | None) -> Iterator[None]:
    """The SQLite connection's busy timeout set to `seconds` meanwhile (a pooled connection gets
    its own back)."""
    if seconds is None or conn.dialect.name != "sqlite":
        yield
        return
    raw = conn.connection.driver_connection
    assert raw is not None
    before = raw.execute("PRAGMA busy_timeout").fetchone()[0]
    raw.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")
    try:
        yield
    finally:
        raw.execute(f"PRAGMA busy_timeout = {int(before)}")
