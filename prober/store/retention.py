"""Retention: drop raw samples (or only their output text) older than an age, keep runs and metrics
for ever, and give the space back.

Samples are nearly all of a store's size (a nightly run of the demo suite is about 1.2 MB of samples
per target and 40 KB of metrics); reports, exports, history and drift baselines read metrics, so a
year of metrics with a few weeks of samples answers everything but `prober samples` on an old run.

Safe on a live store: a run still `running` is never touched, whatever its age, and the work goes
run by run in short write transactions, so a run writing beside it waits at most one of them (the
writer's busy timeout and retries cover that; prober/store/engine.py).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from prober.store.engine import write_transaction
from prober.store.schema import runs, samples

# Pages freed per incremental-vacuum transaction (4 KiB each): a writer waits for one step, not all.
_VACUUM_STEP_PAGES = 4096
# More of the file free than this after a prune (the first prune of a long history): one VACUUM.
_FULL_VACUUM_SHARE = 0.1
# SQLite, while pruning: a page cache, and a write-ahead log between checkpoints, large enough that
# deleting a year's samples neither reads its pages from the OS again and again (the default cache
# is 2 MB) nor checkpoints, an fsync each, every 4 MB of changed pages. Measured on 60 nights of 20
# targets at 2 sites (344,080 samples, 1.8 GB): the first prune 20.4 -> 13.1 s wall.
_PRUNE_CACHE_KIB = 65536
_PRUNE_CHECKPOINT_PAGES = 16384


@dataclass
class PruneResult:
    samples_deleted: int = 0
    outputs_cleared: int = 0
    runs_pruned: int = 0
    reclaimed: str = ""             # how the space was given back


def prune(engine: sa.Engine, *, samples_before: dt.datetime | None = None,
          outputs_before: dt.datetime | None = None) -> PruneResult:
    """Delete the samples of runs started before `samples_before`, and clear the output text of
    the samples of runs started before `outputs_before` (their sha256 and length stay); runs still
    `running` are left alone. Then reclaim the space."""
    touched: set[str] = set()
    deleted = _run_by_run(engine, samples_before, _delete_samples, touched)
    cleared = _run_by_run(engine, outputs_before, _clear_outputs, touched)
    result = PruneResult(samples_deleted=deleted, outputs_cleared=cleared, runs_pruned=len(touched))
    # Also when nothing was deleted now: an earlier prune may have been stopped before it reclaimed.
    result.reclaimed = reclaim(engine, freed_rows=deleted)
    return result


def _run_by_run(engine: sa.Engine, before: dt.datetime | None, work: Callable[[sa.Connection, str], int],
                touched: set[str]) -> int:
    """`work` on each finished run started before `before`, a transaction each; the rows it changed."""
    if before is None:
        return 0
    changed = 0
    for run_id in _finished_runs_before(engine, before):
        count = write_transaction(engine, work, run_id)
        if count:
            changed += count
            touched.add(run_id)
    return changed


def _finished_runs_before(engine: sa.Engine, before: dt.datetime) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(runs.c.id).where(runs.c.started_at < before, runs.c.status != "running")
                                 .order_by(runs.c.started_at)).scalars())


def _still_finished(conn: sa.Connection, run_id: str) -> bool:
    # Checked again inside the write transaction: nothing can start writing to a run that ended.
    return conn.execute(sa.select(runs.c.status).where(runs.c.id == run_id)).scalar() not in (None, "running")


def _roomy(conn: sa.Connection) -> None:
    """The connection's SQLite cache and checkpoint interval for pruning (_PRUNE_CACHE_KIB); a
    pooled connection keeps them, which costs a command that prunes nothing but some memory."""
    if conn.dialect.name == "sqlite":
        raw = conn.connection.driver_connection
        assert raw is not None
        raw.execute(f"PRAGMA cache_size = -{_PRUNE_CACHE_KIB}")
        raw.execute(f"PRAGMA wal_autocheckpoint = {_PRUNE_CHECKPOINT_PAGES}")


def _delete_samples(conn: sa.Connection, run_id: str) -> int:
    _roomy(conn)
    if not _still_finished(conn, run_id):
        return 0
    return conn.execute(samples.delete().where(samples.c.run_id == run_id)).rowcount


def _clear_outputs(conn: sa.Connection, run_id: str) -> int:
    _roomy(conn)
    if not _still_finished(conn, run_id):
        return 0
    return conn.execute(samples.update().where(samples.c.run_id == run_id, samples.c.output_text.is_not(None))
                        .values(output_text=None)).rowcount


def reclaim(engine: sa.Engine, freed_rows: int = 0) -> str:
    """Give freed space back. SQLite: incremental vacuum in small steps when a little was freed (a
    daily prune); a full VACUUM, which holds the write lock while it copies the live part of the
    database, when more than a tenth of the file is free or the store was made before incremental
    vacuum was switched on. PostgreSQL: VACUUM, which makes the space reusable by new rows without
    locking; VACUUM FULL, which returns it to the disk and locks the table while it rewrites it (a
    run writing samples waits), when `freed_rows` is more than a tenth of the table."""
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            left = conn.execute(sa.select(sa.func.count()).select_from(samples)).scalar_one()
            full = freed_rows > _FULL_VACUUM_SHARE * (left + freed_rows)
            conn.exec_driver_sql(f"VACUUM ({'FULL, ' if full else ''}ANALYZE) samples")
        return "VACUUM FULL samples" if full else "VACUUM samples"
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()   # the driver connection is in autocommit mode (prober/store/engine.py)
        cursor.execute(f"PRAGMA cache_size = -{_PRUNE_CACHE_KIB}")      # (VACUUM copies every live page)
        how = "incremental vacuum"
        free = cursor.execute("PRAGMA freelist_count").fetchone()[0]
        pages = cursor.execute("PRAGMA page_count").fetchone()[0]
        if free == 0:
            how = ""                                    # nothing to give back
        if cursor.execute("PRAGMA auto_vacuum").fetchone()[0] != 2 or free > _FULL_VACUUM_SHARE * pages:
            # Incremental vacuum moves pages one by one (measured: about a hundred a second on a
            # busy machine); rewriting the live part of the file is far faster when much was freed.
            cursor.execute("PRAGMA auto_vacuum = INCREMENTAL")
            cursor.execute("VACUUM")
            how = "VACUUM"
            free = 0
        while free > 0:
            cursor.execute(f"PRAGMA incremental_vacuum({_VACUUM_STEP_PAGES})").fetchall()
            left = cursor.execute("PRAGMA freelist_count").fetchone()[0]
            if left >= free:
                break
            free = left
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        cursor.close()
    finally:
        raw.close()
    return how


def size_bytes(engine: sa.Engine) -> int:
    """The database's size: PostgreSQL's pg_database_size; SQLite's file and its write-ahead log."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar_one())
    database = Path(engine.url.database or "")
    return sum(path.stat().st_size for path in (database, Path(f"{database}-wal")) if path.exists())
