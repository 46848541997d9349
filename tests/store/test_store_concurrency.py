"""Several processes on one store: concurrent writers lose nothing, migrations started together
apply once, a killed run keeps its samples."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import sqlalchemy as sa

from prober.store import Store
from prober.store.engine import open_engine
from prober.store.migrations import MIGRATIONS, migrate, schema_migrations
from tests.store.test_store_roundtrip import make_run, make_sample, store_url  # noqa: F401
from tests.support.postgres import postgres_url  # noqa: F401

# spawn: the children start clean (no threads or connections inherited from pytest).
CONTEXT = multiprocessing.get_context("spawn")
PER_PROCESS = 2000


def _write_samples(url: str, run_id: str, count: int, barrier) -> None:
    barrier.wait(60)                   # both open (and migrate) the new database at the same moment
    store = Store.open(url)
    store.create_run(make_run(run_id))
    barrier.wait(60)                   # and write at the same moment
    with store.sample_writer() as writer:
        for index in range(count):
            writer.submit(make_sample(run_id, index, text=f"{run_id} {index} " * 20))
            if index % 100 == 0:
                time.sleep(0.002)      # arrive in many batches, interleaved with the other process
    store.close()


def test_two_processes_write_one_store_at_once(store_url):
    barrier = CONTEXT.Barrier(2)
    children = [CONTEXT.Process(target=_write_samples, args=(store_url, run_id, PER_PROCESS, barrier))
                for run_id in ("proc-a", "proc-b")]
    for child in children:
        child.start()
    for child in children:
        child.join(120)
    assert [child.exitcode for child in children] == [0, 0]

    with Store.open(store_url) as store:
        for run_id in ("proc-a", "proc-b"):
            rows = store.samples(run_id)
            assert sorted(row["request_index"] for row in rows) == list(range(PER_PROCESS)), run_id
        assert {run["id"]: run["sample_count"] for run in store.list_runs()} == \
            {"proc-a": PER_PROCESS, "proc-b": PER_PROCESS}


def _migrate(url: str, barrier, applied) -> None:
    engine = open_engine(url)
    barrier.wait(60)                   # every process finds the database empty, at the same moment
    applied.put(migrate(engine))
    engine.dispose()


def test_migrations_started_by_four_processes_at_once_apply_once(store_url):
    barrier, applied = CONTEXT.Barrier(4), CONTEXT.Queue()
    children = [CONTEXT.Process(target=_migrate, args=(store_url, barrier, applied)) for _ in range(4)]
    for child in children:
        child.start()
    versions = [applied.get(timeout=120) for _ in children]
    for child in children:
        child.join(60)
    assert [child.exitcode for child in children] == [0, 0, 0, 0]
    # each version applied by exactly one of them (the lock), whichever got there first
    assert sorted(v for done in versions for v in done) == list(range(1, len(MIGRATIONS) + 1))
    engine = open_engine(store_url)
    try:
        with engine.connect() as conn:
            recorded = conn.execute(sa.select(schema_migrations.c.version).order_by("version")).scalars().all()
    finally:
        engine.dispose()
    assert recorded == list(range(1, len(MIGRATIONS) + 1))


def _write_then_hang(url: str, run_id: str, pipe) -> None:
    store = Store.open(url)
    store.create_run(make_run(run_id, pid=os.getpid()))
    writer = store.sample_writer()
    for index in range(50):
        writer.submit(make_sample(run_id, index))
    writer.flush()
    pipe.send("flushed")
    for index in range(50, 80):
        writer.submit(make_sample(run_id, index))
    pipe.send("submitted")
    time.sleep(120)                    # killed long before this ends


def test_a_killed_run_keeps_its_samples_and_is_marked_interrupted(store_url):
    parent_end, child_end = CONTEXT.Pipe()
    child = CONTEXT.Process(target=_write_then_hang, args=(store_url, "killed", child_end))
    child.start()
    try:
        assert parent_end.poll(60) and parent_end.recv() == "flushed"
        assert parent_end.poll(60) and parent_end.recv() == "submitted"
        time.sleep(1.2)                # every sample is durable within a second of submit, flushed or not
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    assert child.exitcode == -signal.SIGKILL

    with Store.open(store_url) as store:
        assert store.get_run("killed")["status"] == "running"
        assert sorted(row["request_index"] for row in store.samples("killed")) == list(range(80))
        assert store.mark_stale_runs_interrupted() == ["killed"]
        run = store.get_run("killed")
        assert run["status"] == "interrupted" and run["sample_count"] == 80
