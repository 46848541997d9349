"""The tables as the current code reads and writes them.

This is the shape after the last migration in `prober.store.migrations`; the migrations, not this
module, create and alter tables. When a migration changes a table, change it here too: the test
`test_store_migrations.py::test_migrated_schema_matches_declared_schema` compares the two.
"""

from __future__ import annotations

import sqlalchemy as sa

from prober.store.coltypes import JSONColumn, SafeText, UTCDateTime

metadata = sa.MetaData()

# SQLite only makes an INTEGER PRIMARY KEY a rowid alias (autoincrementing); PostgreSQL gets bigint.
RowId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

RUN_STATUSES = ("running", "complete", "interrupted", "failed")

runs = sa.Table(
    "runs", metadata,
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
    sa.Column("lease_expires_at", UTCDateTime),
    sa.Column("site", sa.Text),       # where it ran from (prober.toml `site`, PROBER_SITE, the host)
    sa.Column("batch", sa.Text),      # the scheduled night a sharded fleet run belongs to
    sa.Index("ix_runs_suite_started_at", "suite", "started_at"),
    sa.Index("ix_runs_started_at", "started_at"),
)

samples = sa.Table(
    "samples", metadata,
    sa.Column("id", RowId, primary_key=True, autoincrement=True),
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
    sa.Column("service_tier", sa.Text),
    sa.Column("entry", sa.Text),      # the suite entry (suites.loader.SuiteEntry.id) that sent it
    sa.Column("ttft_answer_ms", sa.Float),   # first answer token after any reasoning (migration 11)
    # error_type too: a run's sample and error counts come from the index alone
    sa.Index("ix_samples_run_target", "run_id", "target", "error_type"),
)

metrics = sa.Table(
    "metrics", metadata,
    sa.Column("id", RowId, primary_key=True, autoincrement=True),
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
    sa.Column("entry", sa.Text),
    # why the row must never be judged, e.g. ["interval_unbounded"]; NULL when it may be
    sa.Column("flags", JSONColumn()),
    sa.Index("ix_metrics_run_target", "run_id", "target", "entry"),
    sa.Index("ix_metrics_run_name", "run_id", "name", "target"),
)

TARGET_STATUSES = ("running", "complete", "failed", "interrupted")

# How each target of a run ended: a target that could not complete fails alone.
run_targets = sa.Table(
    "run_targets", metadata,
    sa.Column("run_id", sa.Text, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("target", sa.Text, primary_key=True),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("reason", SafeText),
    sa.Column("config_hash", sa.Text, nullable=False),   # the target's own configuration
)

# What each suite entry measured on each target: the basis of "comparable baseline runs".
run_entries = sa.Table(
    "run_entries", metadata,
    sa.Column("run_id", sa.Text, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("target", sa.Text, primary_key=True),
    sa.Column("entry", sa.Text, primary_key=True),
    sa.Column("probe", sa.Text, nullable=False),
    sa.Column("probe_version", sa.Integer, nullable=False),
    sa.Column("params", JSONColumn()),                   # effective parameters, after --param
)

# What the drift tests read of each finished run, per target: each suite entry's metric families
# as prober.alerting.drift derives them from the metric rows (`format` names the code that did).
# Derived, never the truth: the metric rows are, and a row of another format is derived again. A
# baseline of eight weeks is then sixty of these per target, not ten thousand metric rows.
run_values = sa.Table(
    "run_values", metadata,
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("target", sa.Text, primary_key=True),
    sa.Column("format", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),          # JSON: entry -> its families' values
)

# What a report draws of a set of runs (a week, or a period of weeks, of one target, suite and
# site): per metric, the count, min, max and mean of its values over those runs, kept under a
# digest of what it summarizes (prober/reports/period_summaries.py). Derived, never the truth, and
# never stale: another set of runs has another key. A year's report then reads a few hundred of
# these rather than aggregating three million metric rows.
run_summaries = sa.Table(
    "run_summaries", metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("body", sa.Text, nullable=False),          # JSON: the summary rows
)

ALERT_STATES = ("ok", "pending", "firing", "resolved")

# One row per alert identity (an SLO rule on one target/probe/label set, or one drift test).
alerts = sa.Table(
    "alerts", metadata,
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

# The outbox: one row per state change (firing, resolved), with the payload as it was then.
alert_events = sa.Table(
    "alert_events", metadata,
    sa.Column("id", RowId, primary_key=True, autoincrement=True),
    sa.Column("alert_key", sa.Text, sa.ForeignKey("alerts.key"), nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("run_id", sa.Text),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("payload", JSONColumn()),
)

# Per event and sink: delivered or not yet, so a sink that was down gets it on a later run, once.
alert_deliveries = sa.Table(
    "alert_deliveries", metadata,
    sa.Column("event_id", RowId, sa.ForeignKey("alert_events.id"), primary_key=True, autoincrement=False),
    sa.Column("sink", sa.Text, primary_key=True),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("delivered_at", UTCDateTime),
    sa.Column("last_error", SafeText),
    sa.Index("ix_alert_deliveries_pending", "sink", "delivered_at"),
)

# `prober baseline accept`: from `since` on, a target's metric (NULL: every metric) is at its normal
# level; earlier runs leave that metric's drift baseline. A revoked accept no longer counts.
baseline_accepts = sa.Table(
    "baseline_accepts", metadata,
    sa.Column("id", RowId, primary_key=True, autoincrement=True),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("site", sa.Text, nullable=False),
    sa.Column("metric", sa.Text),
    sa.Column("since", UTCDateTime, nullable=False),
    sa.Column("accepted_at", UTCDateTime, nullable=False),
    sa.Column("revoked_at", UTCDateTime),
    sa.Index("ix_baseline_accepts_target", "target", "site"),
)

# One row: this database's identity, drawn when it was created (or upgraded to it). Alert event ids
# sent to sinks carry it, so ids from two stores never collide.
store_identity = sa.Table(
    "store_identity", metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
)
