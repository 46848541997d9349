"""The history benchmark in reduced size (one month, 5 targets, 2 sites): the commands that read
history read what their window holds through indexes, so their work does not grow when the
history outside the window doubles, and the commands that need only metrics read no sample's
content; and the streaming exports' memory does not grow with their window (7 days against 30).

Work is counted, not timed (the machine is shared): on SQLite the virtual-machine steps of every
statement (sqlite3's progress handler, one call per 100 steps), on PostgreSQL the rows the server
read from samples and metrics (pg_stat_user_tables). A command that loads the samples or metrics of
the whole history (as `export --format prometheus` did) does twice the work after the doubling.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import Pool
from typer.testing import CliRunner

from prober.alerting.alerts import evaluate_run
from prober.alerting.drift import baseline_resets
from prober.commands.cli import app
from prober.core.config import load_config
from prober.store import Store
from tests.support.history import nightly_template_store
from tests.support.postgres import create_database, postgres_url  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import history_scale as bench

NIGHTS, TARGETS, SITES = 30, 5, 2
END = dt.datetime.now(dt.UTC)
# Work after the out-of-window history doubled, over the work before: flat, with room for reading
# the runs table (a run row and its targets' statuses a night) that some commands list. One night's
# metrics or samples cost ten times that allowance or more.
FLAT = 1.15
STEPS_PER_RUN_ROW = 500


def _template(tmp_path: Path) -> bench.Template:
    url = f"sqlite:///{tmp_path / 'template.db'}"
    nightly_template_store(url)
    return bench.load_template(url)


def _config(tmp_path: Path, url: str) -> Path:
    path = bench.bench_config(tmp_path, url, bench.target_names(TARGETS))
    # A baseline window inside the month (4 runs, and the 24 candidates select_baselines reads for
    # them): its work must not grow with older history.
    path.write_text(path.read_text() + "[drift]\nbaseline_runs = 4\nmin_baseline_runs = 3\n")
    return path


def _commands(config: Path, out: Path) -> dict[str, Callable[[], None]]:
    def cli(*args: str) -> Callable[[], None]:
        def run() -> None:
            result = CliRunner().invoke(app, [*args, "--config", str(config)], catch_exceptions=False)
            assert result.exit_code in (0, 1), result.output
        return run

    def evaluation() -> None:
        cfg = load_config(config)
        store = Store.open(cfg.store.url)
        try:
            run = store.list_runs(limit=1, suite="nightly", counts=False)[0]
            evaluate_run(store, cfg, run["id"], sinks=[])
            baseline_resets(store, run, cfg.drift)
        finally:
            store.close()

    def newest_run() -> str:
        store = Store.open(load_config(config).store.url)
        try:
            return str(store.list_runs(limit=1, suite="nightly", counts=False)[0]["id"])
        finally:
            store.close()

    def show() -> None:
        cli("show", newest_run())()

    return {
        "show RUN": show,
        "compare --since 14d --until 7d": cli("compare", "--target", "t00", "--since", "14d", "--until", "7d",
                                              "--site", bench.site_names(1)[0]),
        "status": cli("status", "--since", "7d"),
        "history --all --since 7d": cli("history", "--metric", "ttft_p50_ms", "--target", "t00", "--since", "7d",
                                        "--all"),
        "export parquet --since 7d": cli("export", "--format", "parquet", "--since", "7d", "--out",
                                         str(out / "parquet")),
        "export prometheus": cli("export", "--format", "prometheus", "--out", str(out / "prom")),
        "export csv --since 7d": cli("export", "--format", "csv", "--since", "7d", "--out", str(out / "csv")),
        "history --since 7d": cli("history", "--metric", "ttft_p50_ms", "--target", "t00", "--since", "7d"),
        "history --since 365d": cli("history", "--metric", "ttft_p50_ms", "--target", "t00", "--since", "365d"),
        "report --since 7d (json)": cli("report", "--since", "7d", "--format", "json", "--out", str(out / "json")),
        "report --since 7d (html)": cli("report", "--since", "7d", "--out", str(out / "html")),
        "post-run evaluation": evaluation,
    }


# --- SQLite: virtual-machine steps, and which sample columns a statement reads ---------------------

class SqliteWork:
    """Counts, on every SQLite connection opened while it is installed, the VM steps run and the
    columns of `samples` that statements read (the authorizer sees each column a statement uses)."""

    def __init__(self) -> None:
        self.steps = 0
        self.sample_columns: set[str] = set()

    def _on_connect(self, dbapi_conn: Any, _record: Any) -> None:
        if not hasattr(dbapi_conn, "set_progress_handler"):
            return

        def progress() -> int:
            self.steps += 100
            return 0

        def authorize(action: int, table: str | None, column: str | None, *_: Any) -> int:
            if action == 20 and table == "samples" and column:     # SQLITE_READ
                self.sample_columns.add(column)
            return 0                                              # SQLITE_OK

        dbapi_conn.set_progress_handler(progress, 100)
        dbapi_conn.set_authorizer(authorize)

    def measure(self, command: Callable[[], None]) -> tuple[int, set[str]]:
        self.steps, self.sample_columns = 0, set()
        command()
        return self.steps, set(self.sample_columns)


@pytest.fixture
def sqlite_work() -> Iterator[SqliteWork]:
    work = SqliteWork()
    sa.event.listen(Pool, "connect", work._on_connect)
    try:
        yield work
    finally:
        sa.event.remove(Pool, "connect", work._on_connect)


# Columns that only count a run's samples (`prober runs`, a run's header): index-only reads.
COUNTING = {"run_id", "error_type", "target"}
METRICS_ONLY = ("export prometheus", "history --since 7d", "history --since 365d", "post-run evaluation",
                "show RUN", "compare --since 14d --until 7d", "status", "history --all --since 7d")
# Every command whose window is inside the month: its work must not grow with the older history.
WINDOWED = ("export prometheus", "export csv --since 7d", "export parquet --since 7d", "history --since 7d",
            "history --all --since 7d", "report --since 7d (json)", "report --since 7d (html)", "post-run evaluation",
            "show RUN", "compare --since 14d --until 7d", "status")


@pytest.mark.unit
def test_sqlite_commands_read_only_their_window(tmp_path: Path, sqlite_work: SqliteWork) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    template = _template(tmp_path)
    assert len(bench.write_history(url, NIGHTS, TARGETS, template, end=END, sites=SITES)) == NIGHTS * SITES
    commands = _commands(_config(tmp_path, url), tmp_path / "out")
    commands["post-run evaluation"]()   # its alerts exist from now on: both measurements update them
    before = {name: sqlite_work.measure(command) for name, command in commands.items()}

    older = bench.write_history(url, 2 * NIGHTS, TARGETS, template, end=END, sites=SITES)
    assert len(older) == NIGHTS * SITES                                                     # older nights
    after = {name: sqlite_work.measure(command) for name, command in commands.items()}

    for name in WINDOWED:
        allowed = FLAT * before[name][0] + STEPS_PER_RUN_ROW * NIGHTS * SITES
        assert after[name][0] <= allowed, (name, before[name][0], after[name][0])
    for name in METRICS_ONLY:
        assert after[name][1] <= COUNTING, (name, sorted(after[name][1]))
    # the yearly history does grow with the history it shows, but reads no sample
    assert after["history --since 365d"][0] > before["history --since 365d"][0]
    # and the csv export does read the samples of its window
    assert "output_text" in after["export csv --since 7d"][1]


# --- PostgreSQL: rows read from samples and metrics ----------------------------------------------

def _rows_read(url: str) -> dict[str, int]:
    """Rows the server has read from samples and metrics so far, once its statistics settle (a
    closed connection's backend reports its counts as it exits)."""
    engine = sa.create_engine(url)
    try:
        last: dict[str, int] | None = None
        for _ in range(50):
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT pg_stat_clear_snapshot()")
                now = {row.relname: int(row.read) for row in conn.exec_driver_sql(
                    "SELECT relname, coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) AS read "
                    "FROM pg_stat_user_tables WHERE relname IN ('samples', 'metrics')")}
            if now == last:
                return now
            last = now
            time.sleep(0.7)
        return last or {}
    finally:
        engine.dispose()


@pytest.mark.infra
def test_postgresql_commands_read_only_their_window(tmp_path: Path, postgres_url: str) -> None:
    url = create_database(postgres_url, "history_scale")
    template = _template(tmp_path)
    bench.write_history(url, NIGHTS, TARGETS, template, end=END, sites=SITES)
    commands = _commands(_config(tmp_path, url), tmp_path / "out")
    commands["post-run evaluation"]()

    def measure() -> dict[str, dict[str, int]]:
        found = {}
        for name, command in commands.items():
            start = _rows_read(url)
            command()
            end = _rows_read(url)
            found[name] = {table: end.get(table, 0) - start.get(table, 0) for table in ("samples", "metrics")}
        return found

    before = measure()
    bench.write_history(url, 2 * NIGHTS, TARGETS, template, end=END, sites=SITES)
    after = measure()
    one_run_samples = len(template.samples) * TARGETS
    for name in WINDOWED:
        for table in ("samples", "metrics"):
            assert after[name][table] <= FLAT * before[name][table] + 50, (name, table, before[name], after[name])
    for name in METRICS_ONLY:
        # at most the newest run's samples of each site, counted (a run's header), never the history's
        assert after[name]["samples"] <= one_run_samples * SITES, (name, after[name])


# --- the streaming exports: memory flat in the window --------------------------------------------

# Peak memory of an export over the month against over a week (four times the samples): the same
# within this share. Holding the month's rows would add more than the interpreter and pyarrow weigh.
SAME_MEMORY = 1.20


def _export_peaks(tmp_path: Path, url: str) -> dict[str, tuple[float, float]]:
    config = _config(tmp_path, url)
    peaks = {}
    for fmt in ("csv", "parquet"):
        found = [bench.measure([sys.executable, "-m", "prober", "export", "--format", fmt, "--since", since,
                                "--out", str(tmp_path / f"{fmt}-{since}"), "--config", str(config)], tmp_path)
                 for since in ("7d", "30d")]
        assert all(run["exit"] == 0 for run in found), [run["stderr"] for run in found]
        peaks[fmt] = (found[0]["rss_mb"], found[1]["rss_mb"])
    return peaks


@pytest.mark.unit
def test_sqlite_export_memory_is_flat_in_the_window(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    bench.write_history(url, NIGHTS, TARGETS, _template(tmp_path), end=END, sites=SITES)
    for fmt, (week, month) in _export_peaks(tmp_path, url).items():
        assert month <= SAME_MEMORY * week, (fmt, week, month)


@pytest.mark.infra
def test_postgresql_export_memory_is_flat_in_the_window(tmp_path: Path, postgres_url: str) -> None:
    url = create_database(postgres_url, "history_export")
    bench.write_history(url, NIGHTS, TARGETS, _template(tmp_path), end=END, sites=SITES)
    for fmt, (week, month) in _export_peaks(tmp_path, url).items():
        assert month <= SAME_MEMORY * week, (fmt, week, month)
