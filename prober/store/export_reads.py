"""What `prober export --format csv|parquet` reads: samples and metrics across runs, a column at a
time, through the driver's own rows.

The same rows, values and order as `Store.sample_history_batches` and `metric_history_batches`
with `json_text` (oldest run first, by id within a run; JSON objects and arrays of samples as the
text stored and their scalars decoded, every JSON cell of metrics as text; timestamps aware UTC),
but as (column names, one sequence of values per column): the exports convert a column at a time.

Why not through SQLAlchemy's typed rows: at two sites x 20 targets a month is 224,000 samples of
43 columns, and the typed read cost 3.5 CPU s before the first cell was written (a bound parameter
coerced and a statement compiled per batch of ids, a result processor called per timestamp and per
boolean, a Row per row). Here the statement is built once per table, executed as driver SQL (the
driver still raises through SQLAlchemy, so `Store`'s error translation holds), and each column's
values are converted once per batch, by the column's kind: SQLite's text timestamps parsed by
`datetime.fromisoformat`, its 0/1 booleans mapped, PostgreSQL's aware timestamps moved to UTC.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any

import sqlalchemy as sa

from prober.store.coltypes import UTCDateTime
from prober.store.schema import metrics, run_targets, runs, samples

UTC = dt.UTC
# (column names, a sequence of values per column, each as long as the batch)
ColumnBatch = tuple[list[str], list[Sequence[Any]]]

# Sample rows read at a time (ids bound in one IN (...), well under SQLite's limit on parameters):
# a few MB of text, whatever the window.
SAMPLE_BATCH = 500
# Metric rows fetched at a time from a run's (a run of 20 targets holds some 4,000).
METRIC_BATCH = 4000


def kind_of(column_type: sa.types.TypeEngine[Any]) -> str:
    """text, int, float, bool, time (UTC) or json: how an export writes a column."""
    if isinstance(column_type, sa.types.JSON):
        return "json"
    if isinstance(column_type, UTCDateTime):
        return "time"
    for kind, types in (("bool", sa.Boolean), ("int", sa.Integer), ("float", sa.Float)):
        if isinstance(column_type, types):
            return kind
    return "text"


def sample_columns(engine: sa.Engine, *, since: dt.datetime | None = None, target: str | None = None,
                   run_id: str | None = None, batch: int | None = None) -> Iterator[ColumnBatch]:
    """The samples of the runs started since `since` (of `run_id`, of `target`), a batch of at most
    `batch` (SAMPLE_BATCH) rows at a time, each with its run's `suite` and `run_site`."""
    batch = batch or SAMPLE_BATCH
    names = [column.name for column in samples.columns] + ["suite", "run_site"]
    kinds = [kind_of(column.type) for column in samples.columns]
    with engine.connect() as conn:
        convert = _converters(conn.dialect.name, kinds, json_scalars=True)
        select = _select_sql(conn.dialect, samples)
        mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
        statements: dict[int, str] = {}          # one per batch size: full batches share theirs
        ids_sql = (f"SELECT {_quote(conn.dialect, 'id')} FROM {_quote(conn.dialect, 'samples')} WHERE "
                   f"{_quote(conn.dialect, 'run_id')} = {mark}"
                   + (f" AND {_quote(conn.dialect, 'target')} = {mark}" if target is not None else "")
                   + f" ORDER BY {_quote(conn.dialect, 'id')}")
        for window_run, suite, site in _window_runs(conn, since, run_id):
            # the run's ids first, from the run-and-target index alone; then the rows of a batch
            # of ids (ordering a run's rows by id had the database sort every row of the run)
            params = (window_run,) if target is None else (window_run, target)
            ids = [row[0] for rows in _fetched(conn, ids_sql, params, None) for row in rows]
            for start in range(0, len(ids), batch):
                chunk = tuple(ids[start:start + batch])
                sql = statements.get(len(chunk))
                if sql is None:
                    sql = statements[len(chunk)] = (f"{select} WHERE {_quote(conn.dialect, 'id')} IN "
                                                    f"({', '.join([mark] * len(chunk))}) ORDER BY "
                                                    f"{_quote(conn.dialect, 'id')}")
                rows = next(_fetched(conn, sql, chunk, None), [])
                if not rows:
                    continue
                columns = _converted(rows, convert)
                yield names, [*columns, [suite] * len(rows), [site] * len(rows)]


def metric_columns(engine: sa.Engine, *, since: dt.datetime | None = None, target: str | None = None,
                   run_id: str | None = None, batch: int | None = None) -> Iterator[ColumnBatch]:
    """The metric rows of the runs started since `since` (of `run_id`, of `target`), with their
    run's `suite`, `run_started_at`, `run_finished_at`, `run_status` (the row's target's own status
    where one was recorded), `run_site` and `run_batch`; every JSON cell as the text stored; at most
    `batch` (METRIC_BATCH) rows at a time."""
    batch = batch or METRIC_BATCH
    names = [column.name for column in metrics.columns]
    names += ["suite", "run_started_at", "run_finished_at", "run_status", "run_site", "run_batch"]
    kinds = [kind_of(column.type) for column in metrics.columns]
    with engine.connect() as conn:
        convert = _converters(conn.dialect.name, kinds, json_scalars=False)
        mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
        where = f"{_quote(conn.dialect, 'run_id')} = {mark}"
        if target is not None:
            where += f" AND {_quote(conn.dialect, 'target')} = {mark}"
        sql = f"{_select_sql(conn.dialect, metrics)} WHERE {where} ORDER BY {_quote(conn.dialect, 'id')}"
        query = (sa.select(runs.c.id, runs.c.suite, runs.c.started_at, runs.c.finished_at, runs.c.status,
                           runs.c.site, runs.c.batch).order_by(runs.c.started_at, runs.c.id))
        for run, suite, started, finished, status, site, run_batch in conn.execute(_filtered(query, since, run_id)):
            own = dict(conn.execute(sa.select(run_targets.c.target, run_targets.c.status)
                                    .where(run_targets.c.run_id == run)).all())
            for rows in _fetched(conn, sql, (run,) if target is None else (run, target), batch):
                columns = _converted(rows, convert)
                count = len(rows)
                targets = columns[names.index("target")]
                statuses = [own.get(name, status) for name in targets] if own else [status] * count
                yield names, [*columns, [suite] * count, [started] * count, [finished] * count, statuses,
                              [site] * count, [run_batch] * count]


def _fetched(conn: sa.Connection, sql: str, params: tuple[Any, ...], size: int | None) -> Iterator[Sequence[Any]]:
    """The rows of driver SQL as the driver's own tuples (no Row objects), all at once (`size`
    None) or `size` at a time; a driver error leaves as SQLAlchemy's, as through `conn.execute`."""
    dbapi = conn.dialect.loaded_dbapi
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql, params)
        if size is None:
            yield cursor.fetchall()
            return
        while rows := cursor.fetchmany(size):
            yield rows
    except dbapi.Error as exc:
        raise sa.exc.DBAPIError.instance(sql, params, exc, dbapi.Error, dialect=conn.dialect) from exc
    finally:
        cursor.close()


def _window_runs(conn: sa.Connection, since: dt.datetime | None, run_id: str | None) -> list[Any]:
    query = sa.select(runs.c.id, runs.c.suite, runs.c.site).order_by(runs.c.started_at, runs.c.id)
    return list(conn.execute(_filtered(query, since, run_id)))


def _filtered(query: sa.Select[Any], since: dt.datetime | None, run_id: str | None) -> sa.Select[Any]:
    if since is not None:
        query = query.where(runs.c.started_at >= since)
    if run_id is not None:
        query = query.where(runs.c.id == run_id)
    return query


def _quote(dialect: sa.Dialect, name: str) -> str:
    return dialect.identifier_preparer.quote(name)


def _select_sql(dialect: sa.Dialect, table: sa.Table) -> str:
    """SELECT every column of `table`, a JSON column as its stored text (both backends keep the text
    as written), FROM it."""
    cells = []
    for column in table.columns:
        name = _quote(dialect, column.name)
        cells.append(f"CAST({name} AS TEXT) AS {name}" if isinstance(column.type, sa.types.JSON) else name)
    return f"SELECT {', '.join(cells)} FROM {_quote(dialect, table.name)}"


Converter = Callable[[Sequence[Any]], Sequence[Any]] | None


def _converted(rows: Sequence[Sequence[Any]], convert: Sequence[Converter]) -> list[Sequence[Any]]:
    """The rows as columns, each converted by its column's converter (None: as the driver gave it)."""
    columns: list[Sequence[Any]] = list(zip(*rows, strict=True))
    for index, function in enumerate(convert):
        if function is not None:
            columns[index] = function(columns[index])
    return columns


def _converters(backend: str, kinds: Sequence[str], *, json_scalars: bool) -> list[Converter]:
    table: dict[str, Converter] = {"time": _sqlite_times if backend == "sqlite" else _aware_times,
                                   "bool": _sqlite_bools if backend == "sqlite" else None,
                                   "json": _json_scalars_decoded if json_scalars else None}
    return [table.get(kind) for kind in kinds]


def _sqlite_times(values: Sequence[str | None]) -> list[dt.datetime | None]:
    """SQLite's naive UTC text timestamps (UTCDateTime) as aware UTC datetimes: parsed with the
    offset appended (a sixth of the cost of parsing, then replacing the zone)."""
    parse = dt.datetime.fromisoformat
    try:
        return [None if value is None else parse(value + "+00:00") for value in values]
    except ValueError:              # a text with an offset of its own: as UTCDateTime reads it
        return _aware_times([None if value is None else parse(value) for value in values])


def _aware_times(values: Sequence[dt.datetime | None]) -> list[dt.datetime | None]:
    """PostgreSQL's timestamptz (in the session's zone) in UTC; a naive one taken as UTC."""
    return [None if value is None else value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
            for value in values]


_BOOLS = {0: False, 1: True, None: None}


def _sqlite_bools(values: Sequence[int | None]) -> list[bool | None]:
    try:
        return list(map(_BOOLS.__getitem__, values))
    except KeyError:                 # a value other than 0 and 1: what SQLAlchemy makes of it
        return [None if value is None else bool(value) for value in values]


def _json_scalars_decoded(texts: Sequence[str | None]) -> Sequence[Any]:
    """A JSON column of samples: an object or array stays its stored text, a scalar is decoded (as
    `Store.sample_history_batches` gives them). The column is looked at whole first, at C speed."""
    if set(map(itemgetter(0), filter(None, texts))) <= {"{", "["}:
        return texts
    return [text if not text or text[:1] in ("{", "[") else json.loads(text) for text in texts]
