"""Versioned schema migrations: an old database is upgraded in place, never recreated.

`MIGRATIONS` is an ordered list of functions; a migration's version is its position (1-based).
To change the schema, append a function that takes a Connection and alters the tables (for
example with `add_column`), and change `prober.store.schema` to match. Never edit, reorder or remove a
migration that has shipped: databases in the field have recorded it as applied.

Each migration runs in its own transaction together with the row that records it, under a lock
(SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory lock), so two processes opening the same new
database at once apply each migration exactly once. Both backends have transactional DDL, so a
migration that fails leaves the database at the previous version.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from prober.core.errors import ConfigError
from prober.core.records import default_site, utcnow
from prober.store.coltypes import JSONColumn, SafeText, UTCDateTime
from prober.store.engine import redacted, write_transaction

Migration = Callable[[sa.Connection], None]

# Bookkeeping. This table is outside the versioned schema, so its shape must never change.
_bookkeeping = sa.MetaData()
schema_migrations = sa.Table(
    "schema_migrations", _bookkeeping,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("applied_at", UTCDateTime, nullable=False),
)

# An arbitrary constant: the key of the PostgreSQL advisory lock that serializes migrations.
_PG_LOCK_KEY = 0x70726F626572  # "prober"


def add_column(conn: sa.Connection, table: str, column: sa.Column[Any]) -> None:
    """ALTER TABLE ... ADD COLUMN, rendered for the connection's dialect. For use in migrations."""
    preparer = conn.dialect.identifier_preparer
    spec = sa.schema.CreateColumn(column).compile(dialect=conn.dialect)
    conn.exec_driver_sql(f"ALTER TABLE {preparer.quote(table)} ADD COLUMN {spec}")


def _m001_initial(conn: sa.Connection) -> None:
    """runs, samples and metrics."""
    # Frozen: this is the version-1 shape, whatever store.schema says today.
    md = sa.MetaData()
    row_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    sa.Table(
        "runs", md,
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("suite", sa.Text, nullable=False),
        sa.Column("started_at", UTCDateTime, nullable=False),
        sa.Column("finished_at", UTCDateTime),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("prober_version", sa.Text, nullable=False),
        sa.Column("config_hash", sa.Text, nullable=False),
        sa.Column("host", sa.Text, nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("targets", JSONColumn()),
        sa.Column("loop_lag", JSONColumn()),
        sa.Column("notes", JSONColumn()),
        sa.Index("ix_runs_suite_started_at", "suite", "started_at"),
    )
    sa.Table(
        "samples", md,
        sa.Column("id", row_id, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Text, sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("probe", sa.Text, nullable=False),
        sa.Column("case", sa.Text, nullable=False),
        sa.Column("labels", JSONColumn()),
        sa.Column("request_index", sa.Integer, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("final", sa.Boolean, nullable=False),
        sa.Column("protocol", sa.Text, nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("request_body", JSONColumn()),
        sa.Column("request_headers", JSONColumn()),
        sa.Column("stream", sa.Boolean, nullable=False),
        sa.Column("http_status", sa.Integer),
        sa.Column("response_headers", JSONColumn()),
        sa.Column("request_id", sa.Text),
        sa.Column("system_fingerprint", sa.Text),
        sa.Column("response_model", sa.Text),
        sa.Column("output_text", SafeText),
        sa.Column("output_sha256", sa.Text, nullable=False),
        sa.Column("output_chars", sa.Integer, nullable=False),
        sa.Column("output_truncated", sa.Boolean, nullable=False),
        sa.Column("tool_calls", JSONColumn()),
        sa.Column("finish_reason", sa.Text),
        sa.Column("usage", JSONColumn()),
        sa.Column("started_at", UTCDateTime, nullable=False),
        sa.Column("headers_ms", sa.Float),
        sa.Column("first_byte_ms", sa.Float),
        sa.Column("ttft_ms", sa.Float),
        sa.Column("end_ms", sa.Float),
        sa.Column("chunk_offsets_ms", JSONColumn()),
        sa.Column("chunk_chars", JSONColumn()),
        sa.Column("error_type", sa.Text),
        sa.Column("error_message", SafeText),
        sa.Column("findings", JSONColumn()),
        sa.Column("rejected_params", JSONColumn()),
        sa.Column("extra", JSONColumn()),
        sa.Index("ix_samples_run_id", "run_id"),
    )
    sa.Table(
        "metrics", md,
        sa.Column("id", row_id, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Text, sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("probe", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("labels", JSONColumn()),
        sa.Column("value", sa.Float),
        sa.Column("ci_low", sa.Float),
        sa.Column("ci_high", sa.Float),
        sa.Column("n", sa.Integer),
        sa.Column("unit", sa.Text),
        sa.Index("ix_metrics_run_id", "run_id"),
    )
    md.create_all(conn)


def _m002_alerts(conn: sa.Connection) -> None:
    """alerts (each alert's state), alert_events (the outbox of state changes), alert_deliveries."""
    # Frozen: this is the version-2 shape of the alert tables.
    md = sa.MetaData()
    row_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    sa.Table(
        "alerts", md,
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("severity", sa.Text, nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("suite", sa.Text, nullable=False),
        sa.Column("probe", sa.Text, nullable=False),
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("labels", JSONColumn()),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("breaks", sa.Integer, nullable=False),
        sa.Column("value", sa.Float),
        sa.Column("summary", SafeText),
        sa.Column("detail", JSONColumn()),
        sa.Column("fired_at", UTCDateTime),
        sa.Column("resolved_at", UTCDateTime),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.Column("last_run_id", sa.Text),
        sa.Index("ix_alerts_state", "state"),
    )
    sa.Table(
        "alert_events", md,
        sa.Column("id", row_id, primary_key=True, autoincrement=True),
        sa.Column("alert_key", sa.Text, sa.ForeignKey("alerts.key"), nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("payload", JSONColumn()),
    )
    sa.Table(
        "alert_deliveries", md,
        sa.Column("event_id", row_id, sa.ForeignKey("alert_events.id"), primary_key=True, autoincrement=False),
        sa.Column("sink", sa.Text, primary_key=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("delivered_at", UTCDateTime),
        sa.Column("last_error", SafeText),
        sa.Index("ix_alert_deliveries_pending", "sink", "delivered_at"),
    )
    md.create_all(conn)


def _m003_sample_service_tier(conn: sa.Connection) -> None:
    """samples.service_tier: the tier that served the request, as the response said."""
    add_column(conn, "samples", sa.Column("service_tier", sa.Text))


def _m004_run_lease(conn: sa.Connection) -> None:
    # Until when a running run's process has promised to be alive (it renews this while it runs):
    # past it, any host may mark the run interrupted. NULL on runs from before this column.
    add_column(conn, "runs", sa.Column("lease_expires_at", UTCDateTime))


def _m005_run_provenance(conn: sa.Connection) -> None:
    """What each run measured and how each target ended: run_targets (status, reason, config hash
    per target), run_entries (probe version and effective parameters per target and suite entry),
    and the suite entry id on samples and metrics."""
    # Frozen: this is the version-5 shape of these tables.
    md = sa.MetaData()
    sa.Table("runs", md, sa.Column("id", sa.Text, primary_key=True))
    sa.Table(
        "run_targets", md,
        sa.Column("run_id", sa.Text, sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("target", sa.Text, primary_key=True),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("reason", SafeText),
        sa.Column("config_hash", sa.Text, nullable=False),
    )
    sa.Table(
        "run_entries", md,
        sa.Column("run_id", sa.Text, sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("target", sa.Text, primary_key=True),
        sa.Column("entry", sa.Text, primary_key=True),
        sa.Column("probe", sa.Text, nullable=False),
        sa.Column("probe_version", sa.Integer, nullable=False),
        sa.Column("params", JSONColumn()),
    )
    md.create_all(conn, tables=[md.tables["run_targets"], md.tables["run_entries"]])
    add_column(conn, "samples", sa.Column("entry", sa.Text))
    add_column(conn, "metrics", sa.Column("entry", sa.Text))


def _m006_store_identity(conn: sa.Connection) -> None:
    """store_identity: one row naming this database, so that alert event ids from two stores
    (production and a drill) never collide at a receiver that drops duplicates by event id."""
    import uuid

    md = sa.MetaData()
    table = sa.Table(
        "store_identity", md,
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    md.create_all(conn)
    conn.execute(table.insert().values(id=uuid.uuid4().hex[:16], created_at=utcnow()))


def _m007_metric_flags(conn: sa.Connection) -> None:
    """metrics.flags: why a metric row must never be judged (SLO or drift); NULL for the rest."""
    add_column(conn, "metrics", sa.Column("flags", JSONColumn()))


def _m008_run_site_batch(conn: sa.Connection) -> None:
    """runs.site: where the run was probed from (a latency figure from Frankfurt and one from Virginia
    must not share a baseline); runs.batch: the scheduled night a sharded fleet run belongs to.
    Older runs get the first label of the host that ran them, the default a new run gets."""
    add_column(conn, "runs", sa.Column("site", sa.Text))
    add_column(conn, "runs", sa.Column("batch", sa.Text))
    runs = sa.table("runs", sa.column("id", sa.Text), sa.column("host", sa.Text), sa.column("site", sa.Text))
    for run_id, host in conn.execute(sa.select(runs.c.id, runs.c.host)).all():
        conn.execute(runs.update().where(runs.c.id == run_id).values(site=default_site(host)))


def _m009_history_indexes(conn: sa.Connection) -> None:
    """Indexes that match how a long history is read: runs by start time (every --since), samples
    and metrics by run and target (a report section, a drift baseline, the sample counts of
    `prober runs` from the index alone), metrics by run and name (`prober history`, run by run). The
    run-only indexes of version 1 are prefixes of the new ones, so they go."""
    md = sa.MetaData()
    runs = sa.Table("runs", md, sa.Column("started_at", UTCDateTime))
    samples = sa.Table("samples", md, sa.Column("run_id", sa.Text), sa.Column("target", sa.Text),
                       sa.Column("error_type", sa.Text))
    metrics = sa.Table("metrics", md, sa.Column("run_id", sa.Text), sa.Column("target", sa.Text),
                       sa.Column("entry", sa.Text), sa.Column("name", sa.Text))
    sa.Index("ix_samples_run_id", samples.c.run_id).drop(conn)
    sa.Index("ix_metrics_run_id", metrics.c.run_id).drop(conn)
    sa.Index("ix_runs_started_at", runs.c.started_at).create(conn)
    sa.Index("ix_samples_run_target", samples.c.run_id, samples.c.target, samples.c.error_type).create(conn)
    sa.Index("ix_metrics_run_target", metrics.c.run_id, metrics.c.target, metrics.c.entry).create(conn)
    sa.Index("ix_metrics_run_name", metrics.c.run_id, metrics.c.name, metrics.c.target).create(conn)


def _m010_alert_site(conn: sa.Connection) -> None:
    """An alert's identity ends in `|site=NAME` since alerts are per (target, site). An alert
    stored before that would never be judged again (no run makes its old key), so a firing one
    would stay in every report's banner: it takes the site of the run that last judged it, and its
    events follow it. Where that run's site already has an alert of the new key, the newer row is
    kept and the old one's events join it."""
    md = sa.MetaData()
    # Reflected, so that the copy names every column the table has; detail read and written as JSON.
    alerts = sa.Table("alerts", md, sa.Column("detail", JSONColumn()), autoload_with=conn)
    events = sa.Table("alert_events", md, sa.Column("alert_key", sa.Text))
    runs = sa.Table("runs", md, sa.Column("id", sa.Text), sa.Column("site", sa.Text))
    old = conn.execute(sa.select(alerts.c.key, alerts.c.detail, runs.c.site)
                       .join(runs, runs.c.id == alerts.c.last_run_id)
                       .where(alerts.c.key.not_like("%|site=%"), runs.c.site.is_not(None))).all()
    for key, detail, site in old:
        new_key = f"{key}|site={site}"
        if conn.execute(sa.select(alerts.c.key).where(alerts.c.key == new_key)).first() is None:
            copied = [column for column in alerts.c if column.name != "key"]
            conn.execute(alerts.insert().from_select(
                ["key", *(column.name for column in copied)],
                sa.select(sa.literal(new_key), *copied).where(alerts.c.key == key)))
            conn.execute(alerts.update().where(alerts.c.key == new_key)
                         .values(detail={**(detail or {}), "site": site}))
        conn.execute(events.update().where(events.c.alert_key == key).values(alert_key=new_key))
        conn.execute(alerts.delete().where(alerts.c.key == key))


def _m011_sample_ttft_answer(conn: sa.Connection) -> None:
    """samples.ttft_answer_ms: the first answer token after any reasoning (Exchange.first_answer_ns;
    docs/measurements-definitions.md). NULL on samples stored before, as on failed requests."""
    add_column(conn, "samples", sa.Column("ttft_answer_ms", sa.Float))


def _m012_baseline_accepts(conn: sa.Connection) -> None:
    """baseline_accepts: the levels a user accepted as normal (`prober baseline accept`), per
    target, site and metric (NULL: every metric), from a time on; revoked ones keep their row."""
    md = sa.MetaData()
    sa.Table(
        "baseline_accepts", md,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("site", sa.Text, nullable=False),
        sa.Column("metric", sa.Text),
        sa.Column("since", UTCDateTime, nullable=False),
        sa.Column("accepted_at", UTCDateTime, nullable=False),
        sa.Column("revoked_at", UTCDateTime),
        sa.Index("ix_baseline_accepts_target", "target", "site"),
    )
    md.create_all(conn)


def _m013_run_values(conn: sa.Connection) -> None:
    """run_values: each finished run's drift values per target, derived from its metric rows
    (prober/store/schema.py says why)."""
    md = sa.MetaData()
    sa.Table(
        "run_values", md,
        sa.Column("run_id", sa.Text, primary_key=True),
        sa.Column("target", sa.Text, primary_key=True),
        sa.Column("format", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    md.create_all(conn)


def _m014_run_summaries(conn: sa.Connection) -> None:
    """run_summaries: a report's summaries of sets of runs, kept under a digest of the runs
    (prober/store/schema.py says why)."""
    md = sa.MetaData()
    sa.Table(
        "run_summaries", md,
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("body", sa.Text, nullable=False),
    )
    md.create_all(conn)


# Append new migrations here; never edit or reorder the ones above.
MIGRATIONS: list[Migration] = [
    _m001_initial,
    _m002_alerts,
    _m003_sample_service_tier,
    _m004_run_lease,
    _m005_run_provenance,
    _m006_store_identity,
    _m007_metric_flags,
    _m008_run_site_batch,
    _m009_history_indexes,
    _m010_alert_site,
    _m011_sample_ttft_answer,
    _m012_baseline_accepts,
    _m013_run_values,
    _m014_run_summaries,
]


def _migration_name(migration: Migration) -> str:
    return migration.__name__.lstrip("_")


def applied_versions(conn: sa.Connection) -> set[int]:
    if not sa.inspect(conn).has_table(schema_migrations.name):
        return set()
    return set(conn.execute(sa.select(schema_migrations.c.version)).scalars())


def schema_version(engine: sa.Engine) -> int:
    """The highest migration applied to this database (0 for an empty one)."""
    with engine.connect() as conn:
        return max(applied_versions(conn), default=0)


def _check_not_newer(versions: set[int], known: int, engine: sa.Engine) -> None:
    newest = max(versions, default=0)
    if newest > known:
        raise ConfigError(f"store url {redacted(engine.url)!r}: the database is at "
                          f"schema version {newest}, newer than this prober knows ({known}); upgrade prober")


def migrate(engine: sa.Engine, migrations: Sequence[Migration] | None = None,
            upto: int | None = None) -> list[int]:
    """Apply the migrations this database lacks, in order; return the versions applied now.

    `upto` stops at that version (tests use it to make an old database). Idempotent.
    """
    migrations = MIGRATIONS if migrations is None else migrations
    target = len(migrations) if upto is None else upto
    with engine.connect() as conn:
        versions = applied_versions(conn)
    _check_not_newer(versions, len(migrations), engine)
    if all(v in versions for v in range(1, target + 1)):
        return []

    applied: list[int] = []
    for version in range(1, target + 1):
        if write_transaction(engine, _apply, version, migrations):
            applied.append(version)
    return applied


def _apply(conn: sa.Connection, version: int, migrations: Sequence[Migration]) -> bool:
    """Apply one migration unless another process already has; runs inside a write transaction."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_LOCK_KEY)))
    _bookkeeping.create_all(conn, checkfirst=True)
    done = applied_versions(conn)
    _check_not_newer(done, len(migrations), conn.engine)
    if version in done:
        return False
    migration = migrations[version - 1]
    migration(conn)
    conn.execute(schema_migrations.insert().values(
        version=version, name=_migration_name(migration), applied_at=utcnow()))
    return True
