"""The store's public face: open a database, record runs, samples and metrics, and read them back.

Rows come back as plain dicts (JSON columns decoded, datetimes timezone-aware UTC), so callers
never see SQLAlchemy.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import socket
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import sqlalchemy as sa

from prober.core.errors import ConfigError
from prober.core.records import Metric, Run, SampleRow, completed_targets, utcnow
from prober.core.redact import redact_text, redact_value
from prober.store import accepts, export_reads
from prober.store.engine import open_engine, redacted, write_transaction
from prober.store.errors import translating_errors
from prober.store.migrations import migrate
from prober.store.retention import PruneResult, prune, size_bytes
from prober.store.rows import metric_row, run_row
from prober.store.schema import (
    ALERT_STATES,
    RUN_STATUSES,
    TARGET_STATUSES,
    alert_deliveries,
    alert_events,
    alerts,
    metrics,
    run_entries,
    run_summaries,
    run_targets,
    run_values,
    runs,
    samples,
    store_identity,
)
from prober.store.writer import SampleWriteError, SampleWriter

if TYPE_CHECKING:
    import pandas

# A pid whose process started this long after the run did belongs to another process (pid reuse).
_PID_REUSE_SLACK = dt.timedelta(seconds=2)
_LIST_PAGE = 200
# Sample rows fetched at a time when streaming them: a few MB, not a run's hundreds.
_SAMPLE_BATCH = 500
# Room kept aside, in a file beside a SQLite database, for a run's final status write: a run whose
# samples filled the disk must still be able to record that it failed and why. A few pages of WAL
# (4 KiB each, plus frame headers) hold that commit.
_FINAL_WRITE_RESERVE = 64 * 1024
# How long a report waits for the write lock to keep its summaries: they are a cache, and a run
# writing its samples must not hold a report up for the store's usual half minute.
SUMMARY_WRITE_RETRY_S = 2.0


@translating_errors   # a database error leaves any method as a StoreError (prober/store/errors.py)
class Store:
    def __init__(self, engine: sa.Engine) -> None:
        """Use `Store.open(url)`, which also checks and migrates the database."""
        self._engine = engine
        self._writers: list[SampleWriter] = []
        self._identity: str | None = None
        self._reserve: Path | None = None

    @classmethod
    def open(cls, url: str, *, sqlite_busy_timeout: float = 30.0, create: bool = True) -> Store:
        """Connect, create or upgrade the schema; ConfigError (one line, naming the url) if impossible.
        With `create=False` a SQLite file that does not exist is that error, not a new empty store."""
        engine = open_engine(url, sqlite_busy_timeout=sqlite_busy_timeout, create=create)
        try:
            migrate(engine)
        except sa.exc.DBAPIError as exc:
            engine.dispose()
            reason = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
            raise ConfigError(f"store url {redacted(engine.url)!r}: cannot migrate the database: {reason}") from None
        except BaseException:
            engine.dispose()
            raise
        return cls(engine)

    @property
    def url(self) -> str:
        """The database URL, password hidden."""
        return redacted(self._engine.url)

    @property
    def identity(self) -> str:
        """This database's identity (random, drawn by the migration that created its row)."""
        if self._identity is None:
            with self._engine.connect() as conn:
                self._identity = conn.execute(sa.select(store_identity.c.id)).scalar_one()
        return self._identity

    def public_event_id(self, row_id: int) -> str:
        """An outbox event's id as sinks see it (X-Prober-Event): unique across stores, so that a
        drill's event 1 and production's event 1 are not taken for duplicates."""
        return f"{self.identity}-{row_id}"

    @property
    def backend(self) -> str:
        """"sqlite" or "postgresql"."""
        return self._engine.dialect.name

    @property
    def engine(self) -> sa.Engine:
        """For prober/store/ internals and tests; other packages go through the methods."""
        return self._engine

    def reserve_room_for_final_write(self) -> None:
        """SQLite: set `_FINAL_WRITE_RESERVE` bytes aside beside the database file, freed by
        `release_reserved_room` just before the run's last write (PostgreSQL manages its own space)."""
        database = self._engine.url.database if self._engine.url.get_backend_name() == "sqlite" else None
        if not database or database == ":memory:" or self._reserve is not None:
            return
        reserve = Path(database).with_name(Path(database).name + ".prober-reserve")
        try:
            reserve.write_bytes(bytes(_FINAL_WRITE_RESERVE))
        except OSError:
            reserve.unlink(missing_ok=True)   # already no room: storing the samples will say so
            return
        self._reserve = reserve

    def release_reserved_room(self) -> None:
        if self._reserve is not None:
            self._reserve.unlink(missing_ok=True)
            self._reserve = None

    def close(self) -> None:
        """Close the writers still open (raising what they could not store), then the connections."""
        self.release_reserved_room()
        errors: list[SampleWriteError] = []
        for writer in self._writers:
            try:
                writer.close()
            except SampleWriteError as exc:
                errors.append(exc)
        self._writers.clear()
        self._engine.dispose()
        if errors:
            raise errors[0]

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- runs -------------------------------------------------------------------------------

    def create_run(self, run: Run) -> None:
        try:
            write_transaction(self._engine, lambda conn: conn.execute(runs.insert().values(run_row(run))))
        except sa.exc.IntegrityError as exc:
            raise ValueError(f"cannot create run {run.id!r}: {exc.orig}") from None

    def finish_run(self, run_id: str, status: str, finished_at: dt.datetime,
                   loop_lag: Mapping[str, Any] | None = None, notes: dict[str, Any] | None = None,
                   targets: dict[str, tuple[str, str | None]] | None = None) -> None:
        """Set the final status. `notes` are merged into the run's notes; `loop_lag` replaces its value;
        `targets` gives each target's (status, reason).

        One transaction for all of it: when the disk is full, the one small commit that may still
        fit marks the whole run, instead of the first of several taking the last free page."""
        if status not in RUN_STATUSES:
            raise ValueError(f"run status must be one of {', '.join(RUN_STATUSES)}, not {status!r}")
        for target_status, _ in (targets or {}).values():
            _check_target_status(target_status)

        def work(conn: sa.Connection) -> int:
            values: dict[str, Any] = {"status": status, "finished_at": finished_at}
            if loop_lag is not None:
                values["loop_lag"] = loop_lag
            if notes:
                values["notes"] = {**(_current_notes(conn, run_id) or {}), **redact_value(notes)}
            for target, (target_status, reason) in (targets or {}).items():
                _set_target_status(conn, run_id, target, target_status, reason)
            return conn.execute(runs.update().where(runs.c.id == run_id).values(values)).rowcount

        if write_transaction(self._engine, work) == 0:
            raise ValueError(f"unknown run id {run_id!r}")

    def renew_lease(self, run_id: str, expires_at: dt.datetime) -> bool:
        """Extend a running run's lease; False if the run is no longer running (someone judged it
        stale, or it finished): a lease never brings a run back."""
        def work(conn: sa.Connection) -> int:
            return conn.execute(runs.update().where(runs.c.id == run_id, runs.c.status == "running")
                                .values(lease_expires_at=expires_at)).rowcount

        return write_transaction(self._engine, work) == 1

    def mark_stale_runs_interrupted(self) -> list[str]:
        """Runs left 'running' by a process that is gone become 'interrupted'; their ids.

        Gone means: its lease has expired (any host: containers get a new hostname every start), or
        it ran on this host (`socket.gethostname()`, as a Run's `host` holds) and its pid is dead.
        """
        host = socket.gethostname()
        now = utcnow()
        with self._engine.connect() as conn:
            candidates = conn.execute(
                sa.select(runs.c.id, runs.c.host, runs.c.pid, runs.c.started_at, runs.c.lease_expires_at)
                .where(runs.c.status == "running")).all()
        stale = {}
        for row in candidates:
            if row.lease_expires_at is not None and row.lease_expires_at < now:
                stale[row.id] = (row.lease_expires_at, f"lease expired at {row.lease_expires_at.isoformat()}")
            elif row.host == host and not _process_alive(row.pid, row.started_at):
                stale[row.id] = (row.lease_expires_at, f"process {row.pid} on {host} is gone")

        def work(conn: sa.Connection, run_id: str) -> bool:
            lease, reason = stale[run_id]
            notes = {**(_current_notes(conn, run_id) or {}), "interrupted_detected_at": utcnow().isoformat(),
                     "interrupted_because": reason}
            # Only if the lease is still the one judged: a run that renewed it meanwhile is alive.
            updated = conn.execute(runs.update()
                                   .where(runs.c.id == run_id, runs.c.status == "running",
                                          runs.c.lease_expires_at.is_not_distinct_from(lease))
                                   .values(status="interrupted", notes=notes))
            return updated.rowcount == 1

        return [run_id for run_id in stale if write_transaction(self._engine, work, run_id)]

    def target_names(self) -> set[str]:
        """Every target name some run of this store was started against."""
        with self._engine.connect() as conn:
            return {name for listed in conn.execute(sa.select(runs.c.targets)).scalars() for name in listed or []}

    def start_target(self, run_id: str, target: str, config_hash: str, entries: Sequence[dict[str, Any]]) -> None:
        """Record that `target` started in this run, with what each suite entry will measure on it:
        dicts with entry, probe, probe_version and params (the effective parameters)."""
        def work(conn: sa.Connection) -> None:
            conn.execute(run_targets.insert().values(run_id=run_id, target=target, status="running",
                                                     config_hash=config_hash))
            if entries:
                conn.execute(run_entries.insert(), [{**entry, "run_id": run_id, "target": target}
                                                    for entry in entries])

        write_transaction(self._engine, work)

    def finish_target(self, run_id: str, target: str, status: str, reason: str | None = None) -> None:
        """How `target` ended in this run; `reason` says why it did not complete."""
        _check_target_status(status)
        write_transaction(self._engine, lambda conn: _set_target_status(conn, run_id, target, status, reason))

    def run_entries(self, run_id: str, target: str | None = None) -> list[dict[str, Any]]:
        """What each suite entry measured per target (entry, probe, probe_version, params), by target and entry id."""
        query = sa.select(run_entries).where(run_entries.c.run_id == run_id)
        if target is not None:
            query = query.where(run_entries.c.target == target)
        with self._engine.connect() as conn:
            ordered = query.order_by(run_entries.c.target, run_entries.c.entry)
            return [dict(row._mapping) for row in conn.execute(ordered)]

    def list_runs(self, limit: int = 20, suite: str | None = None, target: str | None = None, *,
                  site: str | None = None, batch: str | None = None, since: dt.datetime | None = None,
                  counts: bool = True) -> list[dict[str, Any]]:
        """Newest first, each with `target_status` (see `_add_target_status`) and, unless `counts`
        is False, `sample_count` and `error_count` (samples with an error type).

        With `target`, only runs that list the target or have samples from it; with `site` or
        `batch`, only the runs that probed from that site or belong to that batch; with `since`,
        only runs started at or after it.
        """
        query = sa.select(runs).order_by(runs.c.started_at.desc(), runs.c.id.desc())
        if suite is not None:
            query = query.where(runs.c.suite == suite)
        query = _placed(query, site, batch)
        if since is not None:
            query = query.where(runs.c.started_at >= since)
        found: list[dict[str, Any]] = []
        with self._engine.connect() as conn:
            if target is None:
                found = [dict(row._mapping) for row in conn.execute(query.limit(limit))]
            else:
                offset = 0
                while len(found) < limit:
                    page = [dict(row._mapping) for row in conn.execute(query.limit(_LIST_PAGE).offset(offset))]
                    if not page:
                        break
                    offset += len(page)
                    sampled = set(conn.execute(
                        sa.select(samples.c.run_id).distinct()
                        .where(samples.c.run_id.in_([run["id"] for run in page]), samples.c.target == target)
                    ).scalars())
                    found.extend(run for run in page
                                 if target in (run["targets"] or []) or run["id"] in sampled)
                found = found[:limit]
            if counts:
                _add_counts(conn, found)
            _add_target_status(conn, found)
        return found

    def completed_runs(self, suite: str, targets: Sequence[str], before: dt.datetime, limit: int, *,
                       site: str | None = None) -> dict[str, list[dict[str, Any]]]:
        """Per target of `targets`: up to `limit` runs of `suite` (from `site`, where given) started
        before `before` in which the target completed, newest first, each with `target_status`: the
        candidates of a drift baseline. The targets of a fleet look at the same nights, so the runs
        and their targets' statuses are read once for all of them (a run in several lists is one
        dict: read it, do not change it); never a sample. A target completed a run when its own
        recorded status is "complete", or, in a run stored before per-target status, when the run
        completed and lists it."""
        query = _placed(sa.select(runs).where(runs.c.suite == suite, runs.c.started_at < before)
                        .order_by(runs.c.started_at.desc(), runs.c.id.desc()), site, None)
        found: dict[str, list[dict[str, Any]]] = {target: [] for target in targets}
        offset = 0
        with self._engine.connect() as conn:
            while (fewest := min((len(runs_of) for runs_of in found.values()), default=limit)) < limit:
                size = min(_LIST_PAGE, max(limit - fewest, 1))   # never read far past what is asked
                page = [dict(row._mapping) for row in conn.execute(query.limit(size).offset(offset))]
                if not page:
                    break
                offset += len(page)
                recorded = _add_target_status(conn, page)
                for run in page:
                    # a target whose recorded status is still "running" in a run that ended is left out
                    done = set(completed_targets(run))
                    for target, runs_of in found.items():
                        if len(runs_of) < limit and target in done and \
                                recorded[run["id"]].get(target, "complete") == "complete":
                            runs_of.append(run)
        return found

    def entries_of_runs(self, run_ids: Sequence[str], targets: Sequence[str]
                        ) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
        """target -> run id -> suite entry -> its run_entries row, for many runs and targets in one
        query (a fleet's baselines look at the same nights). The rows' `params` with the same text
        are one object (a baseline's runs repeat their entries' parameters): read them, do not
        change them."""
        found: dict[str, dict[str, dict[str, dict[str, Any]]]] = {target: {run_id: {} for run_id in run_ids}
                                                                   for target in targets}
        decoded: dict[str, Any] = {}
        query = (sa.select(*[_as_json_text(column) for column in run_entries.columns])
                 .where(run_entries.c.target.in_(list(targets))).order_by(run_entries.c.entry))
        with self._engine.connect() as conn:
            for chunk in _chunks(list(run_ids)):
                result = conn.execute(query.where(run_entries.c.run_id.in_(chunk)))
                for row in _json_decoded(list(result.keys()), result, run_entries, decoded, shared=True):
                    found[row["target"]][row["run_id"]][row["entry"]] = row
        return found

    def metrics_of_runs(self, run_ids: Sequence[str], target: str, *, units: Collection[str] = (),
                        names: Collection[str] = (), columns: Collection[str] = (),
                        shared_json: bool = False) -> list[dict[str, Any]]:
        """The metric rows of `target` in these runs (through the run-and-target index), by run then id.
        With `units` or `names`: only the rows with one of these units or one of these names; with
        `columns`, only these columns (what a drift test judges is a small part of a baseline's
        quarter million rows). `shared_json`: rows with the same labels (or flags) share one decoded
        object, for a caller that only reads them (a copy each costs more than the rest of a row)."""
        names_of = [column.name for column in metrics.columns if not columns or column.name in columns]
        rows = self.metric_tuples_of_runs(run_ids, target, names_of, units=units, names=names)
        return list(_json_decoded(names_of, rows, metrics, {}, shared=shared_json))

    def metric_tuples_of_runs(self, run_ids: Sequence[str], target: str, columns: Sequence[str], *,
                              units: Collection[str] = (), names: Collection[str] = ()) -> list[tuple[Any, ...]]:
        """As `metrics_of_runs`, each row a tuple of `columns` in that order, and a JSON column the
        text stored: for a reader of a baseline's hundred thousand rows, a dict and a decoded label
        set per row cost more than the query (it decodes each distinct text once)."""
        query = sa.select(*[_as_json_text(metrics.c[name]) for name in columns]).where(metrics.c.target == target)
        if units or names:
            query = query.where(sa.or_(metrics.c.unit.in_(list(units)), metrics.c.name.in_(list(names))))
        rows: list[tuple[Any, ...]] = []
        with self._engine.connect() as conn:
            for chunk in _chunks(list(run_ids)):
                rows += conn.execute(query.where(metrics.c.run_id.in_(chunk))
                                     .order_by(metrics.c.run_id, metrics.c.id)).all()
        return rows

    def derived_run_values(self, run_ids: Sequence[str], target: str, form: str) -> dict[str, str]:
        """run id -> the drift values kept for `target` in that run (JSON text), for the runs that
        have them in format `form` (prober/alerting/run_values.py)."""
        query = sa.select(run_values.c.run_id, run_values.c.body).where(
            run_values.c.target == target, run_values.c.format == form)
        found: dict[str, str] = {}
        with self._engine.connect() as conn:
            for chunk in _chunks(list(run_ids)):
                result = conn.execute(query.where(run_values.c.run_id.in_(chunk)))
                found.update((run_id, body) for run_id, body in result)
        return found

    def keep_run_values(self, rows: Sequence[tuple[str, str, str, str]]) -> None:
        """Keep (run id, target, format, body) rows of drift values, replacing any of another format."""
        if not rows:
            return

        def work(conn: sa.Connection) -> None:
            for run_id, target, _, _ in rows:
                conn.execute(run_values.delete().where(run_values.c.run_id == run_id, run_values.c.target == target))
            conn.execute(run_values.insert(), [{"run_id": run_id, "target": target, "format": form, "body": body}
                                               for run_id, target, form, body in rows])
        write_transaction(self._engine, work)

    def kept_summaries(self, keys: Collection[str]) -> dict[str, str]:
        """key -> the body kept under it (JSON text), for the keys that have one
        (prober/reports/period_summaries.py)."""
        found: dict[str, str] = {}
        query = sa.select(run_summaries.c.key, run_summaries.c.body)
        with self._engine.connect() as conn:
            for chunk in _chunks(sorted(keys)):
                found.update((key, body) for key, body in conn.execute(query.where(run_summaries.c.key.in_(chunk))))
        return found

    def keep_summaries(self, bodies: dict[str, str]) -> None:
        """Keep these summaries (key -> body), if the store lets us: a report that cannot (a store
        it may only read, a writer holding the lock for long) derives them again next time. A key
        another report kept meanwhile holds the same body, and stays."""
        if not bodies:
            return

        def work(conn: sa.Connection) -> None:
            held: set[str] = set()
            for chunk in _chunks(sorted(bodies)):
                held.update(conn.execute(sa.select(run_summaries.c.key).where(run_summaries.c.key.in_(chunk))).scalars())
            fresh = [{"key": key, "body": body} for key, body in bodies.items() if key not in held]
            if fresh:
                conn.execute(run_summaries.insert(), fresh)
        try:
            write_transaction(self._engine, work, retry_for=SUMMARY_WRITE_RETRY_S, lock_wait=SUMMARY_WRITE_RETRY_S)
        except sa.exc.DBAPIError:
            pass                    # (a cache: the report goes on without keeping them)

    def latest_complete_runs(self, *, since: dt.datetime | None = None, target: str | None = None,
                             run_id: str | None = None) -> dict[tuple[str, str, str], str]:
        """(target, suite, site) -> id of the newest run from that site in which that target
        completed. Reads the runs and their targets' statuses (a few rows a run), never metrics or
        samples."""
        query = (sa.select(runs.c.id, runs.c.suite, runs.c.site, runs.c.status, runs.c.targets, run_targets.c.target,
                           run_targets.c.status.label("target_status"))
                 .outerjoin(run_targets, run_targets.c.run_id == runs.c.id)
                 .order_by(runs.c.started_at.desc(), runs.c.id.desc()))
        if since is not None:
            query = query.where(runs.c.started_at >= since)
        if run_id is not None:
            query = query.where(runs.c.id == run_id)
        latest: dict[tuple[str, str, str], str] = {}
        with self._engine.connect() as conn:
            for row in conn.execute(query):
                if row.target is not None:          # per-target status recorded
                    done = [row.target] if row.target_status == "complete" else []
                else:                               # a run from before it was
                    done = list(row.targets or []) if row.status == "complete" else []
                for name in done:
                    if target is None or name == target:
                        latest.setdefault((name, row.suite, row.site or ""), row.id)
        return latest

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """The run with this id, or with this unique id prefix; None if there is none.

        ConfigError if the prefix is ambiguous (the message lists the matches).
        """
        if not run_id:
            return None
        with self._engine.connect() as conn:
            row = conn.execute(sa.select(runs).where(runs.c.id == run_id)).first()
            if row is None:
                matches = conn.execute(sa.select(runs).where(runs.c.id.startswith(run_id, autoescape=True))
                                       .order_by(runs.c.id).limit(6)).all()
                if len(matches) > 1:
                    shown = ", ".join(match.id for match in matches[:5]) + (", ..." if len(matches) > 5 else "")
                    raise ConfigError(f"run id prefix {run_id!r} is ambiguous: it matches {shown}")
                row = matches[0] if matches else None
            if row is None:
                return None
            run = dict(row._mapping)
            _add_counts(conn, [run])
            _add_target_status(conn, [run])
        return run

    # -- samples and metrics ----------------------------------------------------------------

    def sample_writer(self, max_output_chars: int | None = 65536) -> SampleWriter:
        """A background writer; see store.writer. `max_output_chars=None` stores output unbounded."""
        writer = SampleWriter(self._engine, max_output_chars)
        self._writers.append(writer)
        return writer

    def samples(self, run_id: str, probe: str | None = None, target: str | None = None,
                entry: str | None = None, *, shared_json: bool = False) -> list[SampleRow]:
        """The run's samples in the order they were written. `shared_json`: rows with the same
        JSON text (a fleet's targets get the same request bodies and labels) share one decoded
        object, for a caller that only reads them."""
        if shared_json:
            query = sa.select(*[_as_json_text(column) for column in samples.columns])
        else:
            query = sa.select(samples)
        query = query.where(samples.c.run_id == run_id).order_by(samples.c.id)
        if probe is not None:
            query = query.where(samples.c.probe == probe)
        if target is not None:
            query = query.where(samples.c.target == target)
        if entry is not None:
            query = query.where(samples.c.entry == entry)
        with self._engine.connect() as conn:
            result = conn.execute(query)
            if shared_json:
                return [cast(SampleRow, row) for row in _json_decoded(list(result.keys()), result, samples, {},
                                                                      shared=True)]
            return [cast(SampleRow, dict(row._mapping)) for row in result]

    def samples_frame(self, run_id: str, probe: str | None = None, target: str | None = None,
                      expand: Iterable[str] = ("labels",)) -> pandas.DataFrame:
        """The samples as a DataFrame. Each JSON object column named in `expand` also becomes one
        column per key, named `column.key` (e.g. `labels.concurrency`, `usage.output_tokens`).
        For notebooks: pandas is not one of prober's dependencies, install it beside prober."""
        import pandas as pd

        rows = self.samples(run_id, probe=probe, target=target)
        frame = pd.DataFrame(rows, columns=[column.name for column in samples.columns])
        for column in expand:
            keys: dict[str, None] = {}
            for value in frame[column]:
                if isinstance(value, dict):
                    keys.update(dict.fromkeys(value))
            for key in keys:
                frame[f"{column}.{key}"] = [value.get(key) if isinstance(value, dict) else None
                                            for value in frame[column]]
        return frame

    def write_metrics(self, metric_list: Sequence[Metric]) -> None:
        rows = [metric_row(metric) for metric in metric_list]
        if rows:
            write_transaction(self._engine, lambda conn: conn.execute(metrics.insert(), rows))

    def metrics(self, run_id: str, probe: str | None = None, target: str | None = None,
                entry: str | None = None) -> list[dict[str, Any]]:
        query = (sa.select(*[_as_json_text(column) for column in metrics.columns])
                 .where(metrics.c.run_id == run_id).order_by(metrics.c.id))
        if probe is not None:
            query = query.where(metrics.c.probe == probe)
        if target is not None:
            query = query.where(metrics.c.target == target)
        if entry is not None:
            query = query.where(metrics.c.entry == entry)
        with self._engine.connect() as conn:
            # a run's label sets recur on every target: each text decoded once, each row its own copy
            result = conn.execute(query)
            return list(_json_decoded(list(result.keys()), result, metrics, {}, shared=False))

    # -- alerts and their outbox (prober/alerting/alerts.py) ------------------------------------------

    def alerts(self, keys: Iterable[str] | None = None, state: str | None = None) -> list[dict[str, Any]]:
        """Alert rows (all, or those with these keys, or in this state), oldest key first."""
        query = sa.select(alerts).order_by(alerts.c.key)
        if keys is not None:
            query = query.where(alerts.c.key.in_(list(keys)))
        if state is not None:
            query = query.where(alerts.c.state == state)
        with self._engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]

    def save_alert_changes(self, alert_rows: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]],
                           sinks: Sequence[str]) -> list[int]:
        """Upsert alert rows and append state-change events to the outbox, each with one pending
        delivery per sink, all in one transaction (a crash leaves neither a state without its
        event nor an event without its state). Returns the new event ids."""
        for row in alert_rows:
            if row["state"] not in ALERT_STATES:
                raise ValueError(f"alert state must be one of {', '.join(ALERT_STATES)}, not {row['state']!r}")

        def work(conn: sa.Connection) -> list[int]:
            _upsert_alerts(conn, [redact_value(row) for row in alert_rows])
            ids: list[int] = []
            for event in events:
                inserted = conn.execute(alert_events.insert().values(redact_value(event))).inserted_primary_key
                assert inserted is not None                # an INSERT of one row has its key
                event_id = inserted[0]
                ids.append(event_id)
                for sink in sinks:
                    conn.execute(alert_deliveries.insert().values(event_id=event_id, sink=sink, attempts=0))
            return ids

        return write_transaction(self._engine, work)

    def add_baseline_accept(self, target: str, site: str, metric: str | None, since: dt.datetime) -> int:
        """Record that `metric` (None: every metric) of `target` from `site` is normal from `since`."""
        return accepts.add_accept(self._engine, target, site, metric, since)

    def revoke_baseline_accept(self, accept_id: int) -> bool:
        return accepts.revoke_accept(self._engine, accept_id)

    def baseline_accepts(self, target: str | None = None, site: str | None = None,
                         in_force: bool = True) -> list[dict[str, Any]]:
        return accepts.list_accepts(self._engine, target, site, in_force)

    def alert_events(self, alert_key: str | None = None) -> list[dict[str, Any]]:
        """Outbox events in the order they happened, each with `deliveries`: {sink: delivery row}
        and `event_id`, the id sinks see."""
        query = sa.select(alert_events).order_by(alert_events.c.id)
        if alert_key is not None:
            query = query.where(alert_events.c.alert_key == alert_key)
        with self._engine.connect() as conn:
            events = [dict(row._mapping) for row in conn.execute(query)]
            by_id = {event["id"]: event for event in events}
            for event in events:
                event["deliveries"] = {}
                event["event_id"] = self.public_event_id(event["id"])
            if by_id:
                for row in conn.execute(sa.select(alert_deliveries)
                                        .where(alert_deliveries.c.event_id.in_(list(by_id)))):
                    by_id[row.event_id]["deliveries"][row.sink] = dict(row._mapping)
        return events

    def pending_deliveries(self, sink: str) -> list[dict[str, Any]]:
        """Events not yet delivered to this sink, oldest first, with `attempts`, `last_error` and
        `event_id`, the id sinks see."""
        query = (sa.select(alert_events, alert_deliveries.c.attempts, alert_deliveries.c.last_error)
                 .join(alert_deliveries, alert_deliveries.c.event_id == alert_events.c.id)
                 .where(alert_deliveries.c.sink == sink, alert_deliveries.c.delivered_at.is_(None))
                 .order_by(alert_events.c.id))
        with self._engine.connect() as conn:
            rows = [dict(row._mapping) for row in conn.execute(query)]
        return [{**row, "event_id": self.public_event_id(row["id"])} for row in rows]

    def record_delivery(self, event_id: int, sink: str, delivered_at: dt.datetime | None,
                        error: str | None = None) -> None:
        """One delivery attempt: delivered (with its time) or failed (with the error)."""
        def work(conn: sa.Connection) -> None:
            conn.execute(alert_deliveries.update()
                         .where(alert_deliveries.c.event_id == event_id, alert_deliveries.c.sink == sink)
                         .values(attempts=alert_deliveries.c.attempts + 1, delivered_at=delivered_at,
                                 last_error=None if error is None else redact_text(error)))

        write_transaction(self._engine, work)

    # -- retention (prober/store/retention.py) -------------------------------------------------------

    def prune(self, *, samples_before: dt.datetime | None = None,
              outputs_before: dt.datetime | None = None) -> PruneResult:
        """Drop the samples (or only their output text) of finished runs started before these
        times; runs and metrics stay. Safe beside a running run."""
        return prune(self._engine, samples_before=samples_before, outputs_before=outputs_before)

    def size_bytes(self) -> int:
        """The database's size on disk."""
        return size_bytes(self._engine)

    # -- across runs (reports, history, export) ---------------------------------------------

    def metric_history(self, *, since: dt.datetime | None = None, target: str | None = None,
                       suite: str | None = None, name: str | None = None, run_id: str | None = None,
                       statuses: Sequence[str] | None = None, site: str | None = None,
                       batch: str | None = None,
                       pairs: Mapping[tuple[str, str, str], str] | None = None) -> list[dict[str, Any]]:
        """Metric rows across runs, oldest run first, each with its run's `suite`, `run_started_at`,
        `run_finished_at`, `run_status`, `run_site` and `run_batch`. `since` keeps runs started at
        or after it; `site` and `batch` the runs of that site or batch; `pairs` ((target, suite,
        site) -> run id, as `latest_complete_runs` gives) only those targets' rows of those runs.

        `run_status` is the row's target's own status in the run where one was recorded: in a run
        where another target failed, this target's metrics are those of a complete run."""
        return list(self.iter_metric_history(since=since, target=target, suite=suite, name=name, run_id=run_id,
                                             statuses=statuses, site=site, batch=batch, pairs=pairs))

    def iter_metric_history(self, *, since: dt.datetime | None = None, target: str | None = None,
                            suite: str | None = None, name: str | None = None, run_id: str | None = None,
                            statuses: Sequence[str] | None = None, site: str | None = None,
                            batch: str | None = None,
                            pairs: Mapping[tuple[str, str, str], str] | None = None) -> Iterator[dict[str, Any]]:
        """As `metric_history`, a run at a time (with `since`): an export of a month of a fleet's
        metrics never holds them all."""
        for names, rows in self.metric_history_batches(since=since, target=target, suite=suite, name=name,
                                                       run_id=run_id, statuses=statuses, site=site, batch=batch,
                                                       pairs=pairs):
            yield from (dict(zip(names, row, strict=True)) for row in rows)

    def metric_history_batches(self, *, since: dt.datetime | None = None, target: str | None = None,
                               suite: str | None = None, name: str | None = None, run_id: str | None = None,
                               statuses: Sequence[str] | None = None, site: str | None = None,
                               batch: str | None = None, pairs: Mapping[tuple[str, str, str], str] | None = None,
                               json_text: bool = False) -> Iterator[tuple[list[str], Sequence[Sequence[Any]]]]:
        """The rows of `iter_metric_history` as (column names, a batch of value rows): a CSV export
        converts a batch a column at a time, and a dict per row would cost it more than the write.
        With `json_text`, every JSON cell comes as the text stored, scalars too (an export decodes
        each distinct label set once, not once per row)."""
        own_status = sa.func.coalesce(run_targets.c.status, runs.c.status)
        columns = [_as_json_text(column) if json_text else column for column in metrics.columns]
        # A run's own columns are read once with the run and added to each of its rows: read with
        # every row they were two timestamps per metric for the database driver to parse.
        runs_of = _placed(_across_runs(sa.select(runs.c.id, runs.c.suite, runs.c.started_at, runs.c.finished_at,
                                                 runs.c.site, runs.c.batch)
                                       .order_by(runs.c.started_at, runs.c.id), metrics, since, None, suite, run_id,
                                       None), site, batch)
        query = (sa.select(*columns, own_status.label("run_status"))
                 .join(runs, runs.c.id == metrics.c.run_id)
                 .outerjoin(run_targets, sa.and_(run_targets.c.run_id == metrics.c.run_id,
                                                 run_targets.c.target == metrics.c.target))
                 .order_by(metrics.c.id))
        if target is not None:
            query = query.where(metrics.c.target == target)
        if statuses is not None:
            query = query.where(own_status.in_(list(statuses)))
        if name is not None:
            query = query.where(metrics.c.name == name)
        if pairs is not None:
            if not pairs:
                return
            runs_of = runs_of.where(runs.c.id.in_(sorted(set(pairs.values()))))
            query = query.where(sa.or_(*(sa.and_(metrics.c.run_id == run, metrics.c.target == target_name)
                                         for (target_name, _, _), run in pairs.items())))
        names = [column.name for column in metrics.columns]
        names += ["suite", "run_started_at", "run_finished_at", "run_status", "run_site", "run_batch"]
        width = len(metrics.columns)
        with self._engine.connect() as conn:
            # Run by run, each read an index lookup (by run and target, or run and name): one query
            # joining the window to metrics leaves the plan to the database, and PostgreSQL scans the
            # whole table whenever it guesses the window holds a tenth of it.
            for run, run_suite, started, finished, run_site, run_batch in conn.execute(runs_of).all():
                result = conn.execute(query.where(metrics.c.run_id == run))
                for rows in result.partitions(_SAMPLE_BATCH):
                    yield names, [(*row[:width], run_suite, started, finished, row[width], run_site, run_batch)
                                  for row in rows]

    def metric_runs(self, *, since: dt.datetime | None = None, target: str | None = None,
                    suite: str | None = None, site: str | None = None,
                    batch: str | None = None) -> list[dict[str, Any]]:
        """Each (run, target) pair with metric rows among the runs started since `since` (of `site`
        and `batch` where given), oldest run first: run_id, target, suite, run_site, run_started_at
        and run_status (the target's own status where one was recorded). The runs of the window
        first, then their targets from the run-and-target index of metrics: a planner that scanned
        metrics and joined later would read every night."""
        query = _placed(sa.select(runs.c.id, runs.c.suite, runs.c.site, runs.c.started_at, runs.c.status)
                        .order_by(runs.c.started_at, runs.c.id), site, batch)
        if since is not None:
            query = query.where(runs.c.started_at >= since)
        if suite is not None:
            query = query.where(runs.c.suite == suite)
        found: list[dict[str, Any]] = []
        with self._engine.connect() as conn:
            window = conn.execute(query).all()
            for start in range(0, len(window), _IN_CHUNK):
                chunk = window[start:start + _IN_CHUNK]
                pairs = (sa.select(metrics.c.run_id, metrics.c.target).distinct()
                         .where(metrics.c.run_id.in_([run.id for run in chunk])))
                if target is not None:
                    pairs = pairs.where(metrics.c.target == target)
                stored: dict[str, list[str]] = {}
                for row in conn.execute(pairs):
                    stored.setdefault(row.run_id, []).append(row.target)
                own = {(row.run_id, row.target): row.status for row in conn.execute(
                    sa.select(run_targets.c.run_id, run_targets.c.target, run_targets.c.status)
                    .where(run_targets.c.run_id.in_(list(stored))))} if stored else {}
                for run in chunk:        # the chunk's runs only: each run is in one chunk
                    for name in sorted(stored.get(run.id, [])):
                        found.append({"run_id": run.id, "target": name, "suite": run.suite,
                                      "run_site": run.site, "run_started_at": run.started_at,
                                      "run_status": own.get((run.id, name), run.status)})
        return found

    def metric_summary(self, run_ids: Sequence[str], targets: Sequence[str], *,
                       labels_text: bool = False) -> list[dict[str, Any]]:
        """Per target of `targets` and metric (probe, name, labels) over these runs, computed by the
        database: `count` of finite values, their `low`, `high` and `mean`, and the `unit`. Labels
        come back decoded (as the JSON text stored with `labels_text`). A report summarizes the
        older part of a long window with it, never loading its rows: one call for every target
        whose runs of a period are the same ones."""
        value = metrics.c.value
        finite: sa.ColumnElement[bool] = value.is_not(None)
        if self._engine.dialect.name == "postgresql":   # SQLite stores no NaN or infinity; PostgreSQL does
            finite = sa.and_(finite, value.not_in([math.nan, math.inf, -math.inf]))
        labels_stored = sa.cast(metrics.c.labels, sa.Text)
        query = (sa.select(metrics.c.target, metrics.c.probe, metrics.c.name, labels_stored.label("labels"),
                           sa.func.max(metrics.c.unit).label("unit"), sa.func.count(value).label("count"),
                           sa.func.min(value).label("low"), sa.func.max(value).label("high"),
                           sa.func.avg(value).label("mean"))
                 .where(finite)
                 .group_by(metrics.c.target, metrics.c.probe, metrics.c.name, labels_stored))
        found: dict[tuple[str, str, str, str | None], dict[str, Any]] = {}
        decoded: dict[str, Any] = {}        # the same label sets come back for every target
        with self._engine.connect() as conn:
            # a target at a time: SQLite seeks the run-and-target index for `target = ?` but reads
            # `target IN (...)` more than twice as slowly
            chunks = _chunks(list(run_ids))
            for target, chunk in ((target, chunk) for target in dict.fromkeys(targets) for chunk in chunks):
                for row in conn.execute(query.where(metrics.c.target == target, metrics.c.run_id.in_(chunk))):
                    key = (row.target, row.probe, row.name, row.labels)
                    seen = found.get(key)
                    if seen is None:
                        if labels_text:
                            found[key] = {**row._mapping}
                            continue
                        if row.labels and row.labels not in decoded:
                            decoded[row.labels] = json.loads(row.labels)
                        found[key] = {**row._mapping, "labels": decoded[row.labels] if row.labels else None}
                        continue
                    total = seen["count"] + row.count      # a chunk boundary split the runs: merge
                    seen["mean"] = (seen["mean"] * seen["count"] + row.mean * row.count) / total
                    seen["count"], seen["low"], seen["high"] = total, min(seen["low"], row.low), \
                        max(seen["high"], row.high)
        return list(found.values())

    def sample_history(self, *, since: dt.datetime | None = None, target: str | None = None,
                       suite: str | None = None, run_id: str | None = None) -> list[dict[str, Any]]:
        """Sample rows across runs, oldest run first, each with its run's `suite` and `run_site`."""
        return list(self.iter_sample_history(since=since, target=target, suite=suite, run_id=run_id))

    @staticmethod
    def history_columns(table: str) -> dict[str, str]:
        """The columns `iter_sample_history` ("samples") or `iter_metric_history` ("metrics") yield,
        in order, each with its kind: text, int, float, bool, time (UTC) or json. An export that
        streams fixes its file's schema from these before it reads a row."""
        joined = {"samples": {"suite": "text", "run_site": "text"},
                  "metrics": {"suite": "text", "run_started_at": "time", "run_finished_at": "time",
                              "run_status": "text", "run_site": "text", "run_batch": "text"}}[table]
        table_of = samples if table == "samples" else metrics
        return {**{column.name: export_reads.kind_of(column.type) for column in table_of.columns}, **joined}

    def iter_sample_history(self, *, since: dt.datetime | None = None, target: str | None = None,
                            suite: str | None = None, run_id: str | None = None,
                            json_text: bool = False) -> Iterator[dict[str, Any]]:
        """As `sample_history`, a run at a time: a week of a fleet's samples is hundreds of MB as dicts.
        With `json_text`, a JSON object or array comes as the JSON text stored, not decoded (an
        export writes text anyway); a JSON scalar is decoded as usual."""
        for names, rows in self.sample_history_batches(since=since, target=target, suite=suite, run_id=run_id,
                                                       json_text=json_text):
            yield from (dict(zip(names, row, strict=True)) for row in rows)

    def sample_history_batches(self, *, since: dt.datetime | None = None, target: str | None = None,
                               suite: str | None = None, run_id: str | None = None, json_text: bool = False
                               ) -> Iterator[tuple[list[str], Sequence[Sequence[Any]]]]:
        """The rows of `iter_sample_history` as (column names, a batch of at most _SAMPLE_BATCH value
        rows), for an export that converts a batch a column at a time.

        Run by run (the runs first, by their start-time index), and in each run its sample ids first
        (from the run-and-target index alone), then the rows of a batch of ids: a query ordering a
        run's rows by id had the database copy and sort every row of the run before the first came
        out (a third of the read, at 2.5 kB a sample)."""
        columns = [_as_json_text(column) if json_text else column for column in samples.columns]
        rows_of = (sa.select(*columns, runs.c.suite, runs.c.site.label("run_site"))
                   .join(runs, runs.c.id == samples.c.run_id).order_by(samples.c.id))
        runs_of = _across_runs(sa.select(runs.c.id).order_by(runs.c.started_at, runs.c.id), samples, since, None,
                               suite, run_id, None)
        with self._engine.connect() as conn:
            for window_run in list(conn.execute(runs_of).scalars()):
                ids_of = sa.select(samples.c.id).where(samples.c.run_id == window_run).order_by(samples.c.id)
                if target is not None:
                    ids_of = ids_of.where(samples.c.target == target)
                ids = conn.execute(ids_of).scalars().all()
                for start in range(0, len(ids), _SAMPLE_BATCH):
                    result = conn.execute(rows_of.where(samples.c.id.in_(ids[start:start + _SAMPLE_BATCH])))
                    names = list(result.keys())
                    texts = [index for index, name in enumerate(names) if json_text and _is_json(samples, name)]
                    values = result.all()
                    yield names, _scalars_decoded(values, texts)

    def sample_export_columns(self, *, since: dt.datetime | None = None, target: str | None = None,
                              run_id: str | None = None) -> Iterator[export_reads.ColumnBatch]:
        """The rows of `sample_history_batches(json_text=True)` as (column names, a sequence of values
        per column), read through the driver's rows: what `prober export` writes
        (prober/store/export_reads.py)."""
        yield from export_reads.sample_columns(self._engine, since=since, target=target, run_id=run_id)

    def metric_export_columns(self, *, since: dt.datetime | None = None, target: str | None = None,
                              run_id: str | None = None) -> Iterator[export_reads.ColumnBatch]:
        """The rows of `metric_history_batches(json_text=True)` as `sample_export_columns` gives them."""
        yield from export_reads.metric_columns(self._engine, since=since, target=target, run_id=run_id)


def _scalars_decoded(rows: Sequence[Sequence[Any]], texts: Sequence[int]) -> Sequence[Sequence[Any]]:
    """The rows with the JSON scalars among these columns of JSON text decoded (an object or array
    stays text). A column is looked at whole first, at C speed (the first characters of its texts):
    only the rows of a column that holds a scalar are copied."""
    scalar_columns = [index for index in texts
                      if not set(map(itemgetter(0), filter(None, map(itemgetter(index), rows)))) <= {"{", "["}]
    if not scalar_columns:
        return rows
    decoded = []
    for row in rows:
        scalars = [index for index in scalar_columns if row[index] and row[index][:1] not in ("{", "[")]
        if scalars:
            row = list(row)
            for index in scalars:
                row[index] = json.loads(row[index])
        decoded.append(row)
    return decoded


def _is_json(table: sa.Table, name: str) -> bool:
    return name in table.c and isinstance(table.c[name].type, sa.types.JSON)


def _as_json_text(column: sa.Column[Any]) -> sa.ColumnElement[Any]:
    """A JSON column read as its stored text (both backends keep the text as written)."""
    return sa.cast(column, sa.Text).label(column.name) if isinstance(column.type, sa.types.JSON) else column


def _json_decoded(names: Sequence[str], rows: Iterable[Sequence[Any]], table: sa.Table, decoded: dict[str, Any], *,
                  shared: bool) -> Iterator[dict[str, Any]]:
    """Rows of these columns of `table`, read with their JSON columns as text (`_as_json_text`), as
    dicts with that JSON decoded: each distinct text once (`decoded` keeps them), the rows sharing
    the object when `shared`, else each row a shallow copy (what metrics hold there, labels and
    flags, is flat)."""
    json_at = [index for index, name in enumerate(names) if _is_json(table, name)]
    for values in rows:
        row = dict(zip(names, values, strict=True))
        for index in json_at:
            text = values[index]
            if text is not None:
                if text not in decoded:
                    decoded[text] = json.loads(text)
                value = decoded[text]
                row[names[index]] = value if shared or not isinstance(value, (dict, list)) else value.copy()
        yield row


def _across_runs(query: sa.Select[Any], table: sa.Table, since: dt.datetime | None, target: str | None,
                 suite: str | None, run_id: str | None, statuses: Sequence[str] | None) -> sa.Select[Any]:
    """The filters metric_history and sample_history share."""
    if since is not None:
        query = query.where(runs.c.started_at >= since)
    if target is not None:
        query = query.where(table.c.target == target)
    if suite is not None:
        query = query.where(runs.c.suite == suite)
    if run_id is not None:
        query = query.where(runs.c.id == run_id)
    if statuses is not None:
        query = query.where(runs.c.status.in_(list(statuses)))
    return query


def _placed(query: sa.Select[Any], site: str | None, batch: str | None) -> sa.Select[Any]:
    """Only the runs of this site and of this batch (where given): a baseline from one site never
    judges a run from another, and a batch is one scheduled night of a sharded fleet."""
    if site is not None:
        query = query.where(runs.c.site == site)
    if batch is not None:
        query = query.where(runs.c.batch == batch)
    return query


# Values bound in one IN (...): well under SQLite's limit on bound parameters.
_IN_CHUNK = 500


def _upsert_alerts(conn: sa.Connection, rows: list[dict[str, Any]]) -> None:
    """Insert the alert rows whose key is new and update the others, a statement per batch of rows
    with the same columns (a night's evaluation saves hundreds). A key given twice ends as the
    earlier row updated by the later one."""
    merged: dict[str, dict[str, Any]] = {}
    for row in rows:
        merged[row["key"]] = {**merged.get(row["key"], {}), **row}
    rows, keys = list(merged.values()), list(merged)
    existing: set[str] = set()
    for chunk in _chunks(keys):
        existing.update(conn.execute(sa.select(alerts.c.key).where(alerts.c.key.in_(chunk))).scalars())
    batches: dict[tuple[bool, tuple[str, ...]], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        batches[(row["key"] in existing, tuple(sorted(row)))].append(row)
    for (update, _), batch in batches.items():
        if update:
            conn.execute(alerts.update().where(alerts.c.key == sa.bindparam("match_key")),
                         [{**row, "match_key": row["key"]} for row in batch])
        else:
            conn.execute(alerts.insert(), batch)


def _chunks(values: list[str]) -> list[list[str]]:
    return [values[start:start + _IN_CHUNK] for start in range(0, len(values), _IN_CHUNK)]


def _current_notes(conn: sa.Connection, run_id: str) -> dict[str, Any] | None:
    return conn.execute(sa.select(runs.c.notes).where(runs.c.id == run_id)).scalar()


def _add_counts(conn: sa.Connection, run_list: list[dict[str, Any]]) -> None:
    """Add sample_count and error_count to each run dict, in one query."""
    if not run_list:
        return
    counts = {
        row.run_id: (row.sample_count, row.error_count)
        for row in conn.execute(
            sa.select(samples.c.run_id,
                      sa.func.count().label("sample_count"),
                      sa.func.count(samples.c.error_type).label("error_count"))
            .where(samples.c.run_id.in_([run["id"] for run in run_list]))
            .group_by(samples.c.run_id))
    }
    for run in run_list:
        run["sample_count"], run["error_count"] = counts.get(run["id"], (0, 0))


def _add_target_status(conn: sa.Connection, run_list: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Add `target_status` to each run dict: {target: {status, reason, config_hash}} in the order the
    targets ran (empty for runs stored before targets were recorded). A target still `running` in
    a run that ended (killed, interrupted) takes the run's status. Returns, per run id, each
    target's status as recorded (before that)."""
    if not run_list:
        return {}
    found: dict[str, dict[str, dict[str, Any]]] = {run["id"]: {} for run in run_list}
    recorded: dict[str, dict[str, str]] = {run_id: {} for run_id in found}
    for row in conn.execute(sa.select(run_targets).where(run_targets.c.run_id.in_(list(found)))):
        found[row.run_id][row.target] = {"status": row.status, "reason": row.reason, "config_hash": row.config_hash}
        recorded[row.run_id][row.target] = row.status
    for run in run_list:
        listed = run.get("targets") or []
        statuses = dict(sorted(found[run["id"]].items(),
                               key=lambda item: listed.index(item[0]) if item[0] in listed else len(listed)))
        for state in statuses.values():
            if state["status"] == "running" and run["status"] != "running":
                state["status"] = run["status"]
        run["target_status"] = statuses
    return recorded


def _process_alive(pid: int, run_started_at: dt.datetime) -> bool:
    """Is the process that started this run still there? Mindful of pid reuse and zombies."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass   # alive, owned by another user
    stat = _proc_stat(pid)
    if stat is None:
        return True   # no /proc: the signal check is all we have
    state, process_started_at = stat
    if state in ("Z", "X"):
        return False
    # A process that started after the run did cannot have started it: the pid was reused (a
    # restarted container often gives the prober the same pid every time).
    return process_started_at is None or process_started_at <= run_started_at + _PID_REUSE_SLACK


def _proc_stat(pid: int) -> tuple[str, dt.datetime | None] | None:
    """(state, start time) of a Linux process from /proc, or None where /proc is not available."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            stat = handle.read()
        with open("/proc/stat", encoding="ascii", errors="replace") as handle:
            boot = next((int(line.split()[1]) for line in handle if line.startswith("btime ")), None)
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces and parentheses.
    fields = stat[stat.rfind(")") + 2:].split()
    state = fields[0]
    if boot is None or len(fields) < 20:
        return state, None
    ticks_after_boot = int(fields[19])   # field 22, starttime
    started = boot + ticks_after_boot / os.sysconf("SC_CLK_TCK")
    return state, dt.datetime.fromtimestamp(started, dt.UTC)


def _check_target_status(status: str) -> None:
    if status not in TARGET_STATUSES:
        raise ValueError(f"target status must be one of {', '.join(TARGET_STATUSES)}, not {status!r}")


def _set_target_status(conn: sa.Connection, run_id: str, target: str, status: str, reason: str | None) -> None:
    conn.execute(run_targets.update().where(run_targets.c.run_id == run_id, run_targets.c.target == target)
                 .values(status=status, reason=None if reason is None else redact_text(reason)))
