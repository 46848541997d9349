"""Versioned migrations: a new database gets the whole schema, an old one is upgraded in place."""

from __future__ import annotations

import os

import pytest
import sqlalchemy as sa

from prober.core.errors import ConfigError
from prober.store import MIGRATIONS, Store, migrate, schema_version
from prober.store.engine import open_engine
from prober.store.migrations import add_column
from prober.store.schema import metadata
from tests.store.test_store_roundtrip import make_run, make_sample, store_url, write_samples  # noqa: F401
from tests.support.postgres import postgres_url  # noqa: F401

SAMPLE_COLUMNS = [
    "id", "run_id", "target", "probe", "case", "labels", "request_index", "attempt", "final", "protocol", "url",
    "request_body", "request_headers", "stream", "http_status", "response_headers", "request_id",
    "system_fingerprint", "response_model", "output_text", "output_sha256", "output_chars", "output_truncated",
    "tool_calls", "finish_reason", "usage", "started_at", "headers_ms", "first_byte_ms", "ttft_ms", "end_ms",
    "chunk_offsets_ms", "chunk_chars", "error_type", "error_message", "findings", "rejected_params", "extra",
    "service_tier", "entry", "ttft_answer_ms",
]
RUN_COLUMNS = ["id", "suite", "started_at", "finished_at", "status", "prober_version", "config_hash", "host", "pid",
               "targets", "loop_lag", "notes", "lease_expires_at", "site", "batch"]
METRIC_COLUMNS = ["id", "run_id", "target", "probe", "name", "labels", "value", "ci_low", "ci_high", "n", "unit",
                  "entry", "flags"]


def _columns(engine: sa.Engine, table: str) -> list[str]:
    return [column["name"] for column in sa.inspect(engine).get_columns(table)]


def _indexes(engine: sa.Engine, table: str) -> dict[str, list[str]]:
    return {index["name"]: index["column_names"] for index in sa.inspect(engine).get_indexes(table)}


def _bookkeeping(engine: sa.Engine) -> list[tuple]:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT version, name, applied_at FROM schema_migrations ORDER BY version")).all()


def test_new_database_gets_the_whole_schema(store_url):
    Store.open(store_url).close()
    engine = open_engine(store_url)
    try:
        assert set(sa.inspect(engine).get_table_names()) == {"runs", "samples", "metrics", "schema_migrations",
                                                              "alerts", "alert_events", "alert_deliveries",
                                                              "run_targets", "run_entries", "store_identity",
                                                              "baseline_accepts", "run_values", "run_summaries"}
        assert _columns(engine, "runs") == RUN_COLUMNS
        assert _columns(engine, "samples") == SAMPLE_COLUMNS
        assert _columns(engine, "metrics") == METRIC_COLUMNS
        assert _indexes(engine, "runs") == {"ix_runs_suite_started_at": ["suite", "started_at"],
                                            "ix_runs_started_at": ["started_at"]}
        assert _indexes(engine, "samples") == {"ix_samples_run_target": ["run_id", "target", "error_type"]}
        assert _indexes(engine, "metrics") == {"ix_metrics_run_target": ["run_id", "target", "entry"],
                                               "ix_metrics_run_name": ["run_id", "name", "target"]}
        assert [row[:2] for row in _bookkeeping(engine)] == [(1, "m001_initial"), (2, "m002_alerts"),
                                                               (3, "m003_sample_service_tier"), (4, "m004_run_lease"),
                                                               (5, "m005_run_provenance"), (6, "m006_store_identity"),
                                                               (7, "m007_metric_flags"),
                                                               (8, "m008_run_site_batch"),
                                                               (9, "m009_history_indexes"),
                                                               (10, "m010_alert_site"),
                                                               (11, "m011_sample_ttft_answer"),
                                                               (12, "m012_baseline_accepts"),
                                                               (13, "m013_run_values"),
                                                               (14, "m014_run_summaries")]
        assert schema_version(engine) == len(MIGRATIONS)
    finally:
        engine.dispose()


def test_migrated_schema_matches_declared_schema(store_url):
    """prober.store.schema (what the code queries) and the migrations (what databases get) agree."""
    Store.open(store_url).close()
    engine = open_engine(store_url)
    try:
        for table in metadata.sorted_tables:
            assert _columns(engine, table.name) == [column.name for column in table.columns], table.name
            assert _indexes(engine, table.name) == \
                {index.name: [column.name for column in index.columns] for index in table.indexes}, table.name
            reflected = {column["name"]: column["nullable"] for column in sa.inspect(engine).get_columns(table.name)}
            declared = {column.name: column.nullable for column in table.columns}
            assert reflected == declared, table.name
    finally:
        engine.dispose()


def test_migrating_twice_changes_nothing(store_url):
    engine = open_engine(store_url)
    try:
        assert migrate(engine) == list(range(1, len(MIGRATIONS) + 1))
        before = _bookkeeping(engine)
        assert migrate(engine) == []
        Store.open(store_url).close()
        assert _bookkeeping(engine) == before
    finally:
        engine.dispose()


def _m002_add_sample_note_and_baselines(conn: sa.Connection) -> None:
    """A later migration, as a future issue might append one."""
    add_column(conn, "samples", sa.Column("note", sa.Text, server_default="none"))
    baselines = sa.Table("baselines", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True),
                         sa.Column("name", sa.Text, nullable=False))
    baselines.create(conn)
    conn.execute(sa.text("UPDATE samples SET note = 'from v1'"))


def test_old_database_is_upgraded_in_place_and_keeps_its_rows(store_url):
    with Store.open(store_url) as old:            # the version-1 schema, with data in it
        old.create_run(make_run("r1"))
        write_samples(old, [make_sample("r1", i) for i in range(5)])
    inode = os.stat(store_url.removeprefix("sqlite:///")).st_ino if store_url.startswith("sqlite") else None

    engine = open_engine(store_url)
    try:
        later = [*MIGRATIONS, _m002_add_sample_note_and_baselines]
        assert migrate(engine, later) == [len(later)]
        assert migrate(engine, later) == []
        assert schema_version(engine) == len(later)
        assert "note" in _columns(engine, "samples") and "baselines" in sa.inspect(engine).get_table_names()
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT request_index, note FROM samples ORDER BY id")).all()
        assert rows == [(i, "from v1") for i in range(5)]
        if inode is not None:
            assert os.stat(store_url.removeprefix("sqlite:///")).st_ino == inode   # the same file, not a new one
        assert [row[1] for row in _bookkeeping(engine)] == \
            [*(migration.__name__.lstrip("_") for migration in MIGRATIONS), "m002_add_sample_note_and_baselines"]
    finally:
        engine.dispose()

    # This code knows one migration fewer than the database has: refuse rather than misread it.
    with pytest.raises(ConfigError, match=rf"schema version {len(later)}, newer than this prober knows "
                                          rf"\({len(MIGRATIONS)}\)"):
        Store.open(store_url)


def _old_database(store_url: str, version: int, *statements: tuple[str, dict[str, str]]) -> None:
    """A database migrated only up to `version`, holding what `statements` insert."""
    engine = open_engine(store_url)
    try:
        migrate(engine, upto=version)
        with engine.begin() as conn:
            for statement, values in statements:
                conn.execute(sa.text(statement), values)
    finally:
        engine.dispose()


def _old_run(host: str, site_column: bool = False) -> tuple[str, dict[str, str]]:
    """An INSERT of run r1 from `host` (and from site 'fra' where the runs table has sites)."""
    site = (", site", ", 'fra'") if site_column else ("", "")
    return (f"INSERT INTO runs (id, suite, started_at, status, prober_version, config_hash, host, pid{site[0]}) "
            f"VALUES ('r1', 'latency', '2026-01-01 00:00:00', 'complete', '0', 'h', :host, 1{site[1]})",
            {"host": host})


def test_metric_rows_of_a_version_2_database_gain_no_flags(store_url):
    _old_database(store_url, 2, _old_run("host"),
                  ("INSERT INTO metrics (run_id, target, probe, name, value) "
                   "VALUES ('r1', 'emu', 'latency', 'ttft_p99_ms', 5.0)", {}))
    with Store.open(store_url) as upgraded:
        (row,) = upgraded.metrics("r1")
    assert row["value"] == 5.0 and row["flags"] is None


def test_migrate_stops_at_a_version_and_resumes(store_url):
    later = [*MIGRATIONS, _m002_add_sample_note_and_baselines]
    engine = open_engine(store_url)
    try:
        assert migrate(engine, later, upto=1) == [1]
        assert schema_version(engine) == 1 and "note" not in _columns(engine, "samples")
        assert migrate(engine, later) == list(range(2, len(later) + 1))
    finally:
        engine.dispose()


def test_a_failing_migration_leaves_the_previous_version(store_url):
    def _m002_broken(conn: sa.Connection) -> None:
        add_column(conn, "samples", sa.Column("half_done", sa.Text))
        conn.execute(sa.text("SELECT no_such_column FROM samples"))

    engine = open_engine(store_url)
    try:
        with pytest.raises(sa.exc.DBAPIError):
            migrate(engine, [*MIGRATIONS, _m002_broken])
        assert schema_version(engine) == len(MIGRATIONS)
        assert "half_done" not in _columns(engine, "samples")   # DDL rolled back with the transaction
    finally:
        engine.dispose()


def test_runs_of_a_version_7_database_get_their_host_as_site(store_url):
    """A store upgraded to sites keeps old runs in the baseline a new run from the same host joins."""
    _old_database(store_url, 7, _old_run("probe-7.fra.example.net"))
    with Store.open(store_url) as upgraded:
        run = upgraded.get_run("r1")
    assert run is not None and run["site"] == "probe-7" and run["batch"] is None


def test_an_alert_from_before_sites_takes_its_runs_site_and_keeps_its_events(store_url):
    """A firing alert stored before alerts were per site gets the identity the next run from its
    site judges (so that run can resolve it) and its outbox events; one whose new identity is
    taken already gives way to the newer row."""
    from prober.alerting.alerts import Observation

    alert = ("INSERT INTO alerts (key, kind, name, severity, target, suite, probe, metric, state, breaks, detail, "
             "updated_at, last_run_id) VALUES (:key, 'slo', 'n', 'page', 'emu', 'latency', 'latency', "
             "'ttft_p50_ms', :state, 2, '{\"for\": 2}', '2026-01-01 00:00:00', 'r1')")
    event = ("INSERT INTO alert_events (alert_key, status, run_id, created_at) "
             "VALUES (:key, 'firing', 'r1', '2026-01-01 00:00:00')")
    _old_database(store_url, 9, _old_run("probe-7", site_column=True),
                  *((alert, {"key": key, "state": state}) for key, state in
                    (("slo|ttft|emu", "firing"), ("slo|itl|emu", "firing"), ("slo|itl|emu|site=fra", "ok"))),
                  (event, {"key": "slo|ttft|emu"}), (event, {"key": "slo|itl|emu"}))
    with Store.open(store_url) as upgraded:
        alerts = {row["key"]: row for row in upgraded.alerts()}
    assert sorted(alerts) == ["slo|itl|emu|site=fra", "slo|ttft|emu|site=fra"]
    moved = alerts["slo|ttft|emu|site=fra"]
    assert moved["state"] == "firing" and moved["breaks"] == 2 and moved["detail"] == {"for": 2, "site": "fra"}
    assert alerts["slo|itl|emu|site=fra"]["state"] == "ok"        # the newer row stays
    observation = Observation(key="slo|ttft|emu", kind="slo", name="n", severity="page", target="emu",
                              suite="latency", probe="latency", metric="ttft_p50_ms", labels={}, value=1.0,
                              broken=False, for_runs=2, summary="", site="fra")
    assert observation.identity == "slo|ttft|emu|site=fra"          # the next run from fra judges it
    engine = open_engine(store_url)
    try:
        with engine.connect() as conn:
            keys = sorted(conn.execute(sa.text("SELECT alert_key FROM alert_events")).scalars())
    finally:
        engine.dispose()
    assert keys == ["slo|itl|emu|site=fra", "slo|ttft|emu|site=fra"]
