"""A year of nightly history for a fleet, and how long the commands that read it take.

    python bench/history_scale.py                       # 365 nights x 20 targets, SQLite and PostgreSQL
    python bench/history_scale.py --nights 30 --targets 5 --backends sqlite

The history is cloned, at the SQL level, from one real run: the nightly suite against the
in-process emulator (or `--template URL`, a store holding a nightly run). One run per night and
site (`--sites`, default 2) holds every target, each with the template target's samples, metrics,
suite entries and status; metric values in milliseconds get a little deterministic noise from
night to night. Writing a year for 20 targets takes a few INSERT ... SELECT statements per night,
not a Python object per row.

Then each command runs in its own child process, measured in CPU seconds (its process tree's user
and system time: load hardly moves them), peak resident memory, and wall time (quote the load
average beside it): `prober report --since 30d` (first into an empty directory, then again, as a
nightly report finds the site it wrote the night before) and `--since 365d`, `prober history` of one metric
of one target over the year (a row per week, and `--all`), `prober show` of the newest run,
`prober compare` of one target's two last weeks, the post-run evaluation of the newest run (SLO
rules, drift against the baselines, baseline resets), `prober export` as CSV over 7 and 30 days,
Parquet over 30 days and Prometheus, and `prober status`. Then the default retention (`prober
prune`, prober.toml `[retention]`) is applied to the unpruned history (the first prune), and once
more with one more night to drop (a nightly prune); the store size per night is printed before and
after. The last line:

    history-scale: worst_cpu_s=X worst_peak_mb=Y prune_first_s=P db_mb_per_night=Z

X and Y the worst CPU seconds and peak MB of any command but prune on any backend, P the first
prune's wall seconds, Z the store size per night for the whole fleet after the default retention
(each the largest over the backends).

`write_history(url, nights, targets, template)` is the generator, for tests and other benches.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from prober.store import Store  # noqa: E402
from prober.store.coltypes import UTCDateTime  # noqa: E402
from prober.store.schema import metrics, run_entries, run_targets, runs, samples  # noqa: E402

# The suites `make demo` runs: the built-in nightly suite with each suite's grid shadowed by the
# demo's smaller one (examples/local-demo/suites). Its per-target counts are those issue 16 quotes.
DEMO_SUITES = ROOT / "examples" / "local-demo" / "suites"
HISTORY_METRIC = "ttft_p50_ms"
RUN_HOUR_UTC = 2


# --- the template: one real nightly run ---------------------------------------------------------

@dataclass
class Template:
    """One target's rows from a real run: what every (night, target) of the history repeats."""

    run: dict[str, Any]
    target_status: dict[str, Any]
    entries: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)


def _without_id(row: Any) -> dict[str, Any]:
    return {key: value for key, value in row._mapping.items() if key != "id"}


def load_template(url: str, suite: str = "nightly") -> Template:
    """The newest complete run of `suite` in the store at `url`, its first target's rows."""
    store = Store.open(url)
    try:
        with store.engine.connect() as conn:
            run = conn.execute(sa.select(runs).where(runs.c.suite == suite, runs.c.status == "complete")
                               .order_by(runs.c.started_at.desc()).limit(1)).first()
            if run is None:
                raise SystemExit(f"history-scale: no complete {suite!r} run in {store.url}")
            target = run.targets[0]
            status = conn.execute(sa.select(run_targets).where(run_targets.c.run_id == run.id,
                                                               run_targets.c.target == target)).one()
            return Template(
                run=dict(run._mapping), target_status=dict(status._mapping),
                entries=[dict(r._mapping) for r in conn.execute(
                    sa.select(run_entries).where(run_entries.c.run_id == run.id, run_entries.c.target == target))],
                samples=[_without_id(r) for r in conn.execute(
                    sa.select(samples).where(samples.c.run_id == run.id, samples.c.target == target)
                    .order_by(samples.c.id))],
                metrics=[_without_id(r) for r in conn.execute(
                    sa.select(metrics).where(metrics.c.run_id == run.id, metrics.c.target == target)
                    .order_by(metrics.c.id))])
    finally:
        store.close()


def template_config(workdir: Path, store_url: str) -> Path:
    """A prober.toml with one in-process emulator target (OpenAI protocol: the penalty probe needs it)."""
    path = workdir / "template.toml"
    path.write_text(f'suite_paths = ["{DEMO_SUITES}"]\n[store]\nurl = "{store_url}"\n[runner]\nprogress = false\n'
                    '[targets.emu]\nprotocol = "openai"\nmodel = "emulator-1"\nemulator = { }\n')
    return path


def make_template(workdir: Path, suite: str = "nightly") -> str:
    """Run `suite` against the emulator into a store in `workdir`; its URL."""
    url = f"sqlite:///{workdir / 'template.db'}"
    config = template_config(workdir, url)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "prober", "run", "--config", str(config), "--suite", suite],
                          cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"history-scale: the template run failed (exit {done.returncode}): {done.stderr[-2000:]}")
    print(f"template: {suite} suite against the emulator in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return url


# --- the generator ------------------------------------------------------------------------------

def target_names(count: int) -> list[str]:
    return [f"t{index:02d}" for index in range(count)]


def night_start(night: int, nights: int, end: dt.datetime) -> dt.datetime:
    """Night 0 is the oldest; the newest run starts on `end`'s day at RUN_HOUR_UTC (the day before
    when that is still to come)."""
    newest = end.replace(hour=RUN_HOUR_UTC, minute=0, second=0, microsecond=0)
    if newest > end:
        newest -= dt.timedelta(days=1)
    return newest - dt.timedelta(days=nights - 1 - night)


def site_names(count: int) -> list[str]:
    return [f"site-{chr(ord('a') + index)}" for index in range(count)]


def run_id(started: dt.datetime, site: str = "") -> str:
    """A night's run id, from its date and site (the first site's has none): a longer history
    with the same end shares its newest runs."""
    return f"hs{started:%Y%m%d}" + (f"-{site}" if site and site != site_names(1)[0] else "")


def _copy(conn: sa.Connection, table: sa.Table, where: Any, replace: dict[str, Any]) -> None:
    """INSERT INTO table SELECT the rows matching `where`, with the columns in `replace` set to
    these SQL expressions (the id column is left to the database)."""
    columns = [column for column in table.columns if column.name != "id"]
    selected = [replace[column.name].label(column.name) if column.name in replace else column for column in columns]
    conn.execute(table.insert().from_select([column.name for column in columns],
                                            sa.select(*selected).where(where)))


def _noisy(column: sa.ColumnElement[Any], night: int) -> sa.ColumnElement[Any]:
    """A millisecond figure moved by up to +-1% from night to night (deterministic, per row)."""
    factor = 1 + ((metrics.c.id + night * 7) % 11 - 5) * 0.002
    return sa.case((metrics.c.unit == "ms", column * factor), else_=column)


def write_history(url: str, nights: int, targets: int, template: Template, *,
                  end: dt.datetime | None = None, sites: int = 1) -> list[str]:
    """Write the nightly runs of the `nights` nights up to `end` (default now) for `targets`
    targets, one run a night from each of `sites` sites, into the store at `url` (migrated first),
    skipping runs it already holds; the run ids written, oldest night first. The first run written
    holds the template's rows; the others are copied from it in the database. A second call with
    more nights and the same `end` adds older history outside any window that ends at `end`."""
    end = end or dt.datetime.now(dt.UTC)
    names = target_names(targets)
    wanted = [(night_start(night, nights, end), site) for night in range(nights) for site in site_names(sites)]
    store = Store.open(url)
    try:
        with store.engine.begin() as conn:
            held = set(conn.execute(sa.select(runs.c.id).where(runs.c.id.in_([run_id(*w) for w in wanted])))
                       .scalars())
            missing = [w for w in wanted if run_id(*w) not in held]
            if missing:
                _write_seed(conn, template, names, *missing[0])
        for started, site in missing[1:]:
            with store.engine.begin() as conn:     # a run a transaction: the SQLite WAL stays small
                _write_night(conn, template, names, run_id(*missing[0]), started, site)
    finally:
        store.close()
    return [run_id(*w) for w in missing]


def _run_row(template: Template, names: Sequence[str], started: dt.datetime, site: str) -> dict[str, Any]:
    took = (template.run["finished_at"] or template.run["started_at"]) - template.run["started_at"]
    return {**template.run, "id": run_id(started, site), "started_at": started, "finished_at": started + took,
            "status": "complete", "targets": list(names), "lease_expires_at": None, "batch": None, "site": site}


def _write_seed(conn: sa.Connection, template: Template, names: Sequence[str], started: dt.datetime,
                site: str) -> None:
    """The template's rows for the first target, then copied to the others."""
    seed, first = run_id(started, site), names[0]
    conn.execute(runs.insert().values(_run_row(template, names, started, site)))
    conn.execute(run_targets.insert().values({**template.target_status, "run_id": seed, "target": first}))
    if template.entries:
        conn.execute(run_entries.insert(), [{**row, "run_id": seed, "target": first} for row in template.entries])
    if template.samples:
        conn.execute(samples.insert(), [{**row, "run_id": seed, "target": first, "started_at": started}
                                        for row in template.samples])
    if template.metrics:
        conn.execute(metrics.insert(), [{**row, "run_id": seed, "target": first} for row in template.metrics])
    for name in names[1:]:
        for table in (run_targets, run_entries, samples, metrics):
            _copy(conn, table, sa.and_(table.c.run_id == seed, table.c.target == first),
                  {"target": sa.literal(name)})


def _write_night(conn: sa.Connection, template: Template, names: Sequence[str], seed: str,
                 started: dt.datetime, site: str) -> None:
    new = run_id(started, site)
    conn.execute(runs.insert().values(_run_row(template, names, started, site)))
    same_run = {"run_id": sa.literal(new)}
    _copy(conn, run_targets, run_targets.c.run_id == seed, same_run)
    _copy(conn, run_entries, run_entries.c.run_id == seed, same_run)
    _copy(conn, samples, samples.c.run_id == seed,
          {**same_run, "started_at": sa.literal(started, UTCDateTime())})
    night = started.toordinal()
    _copy(conn, metrics, metrics.c.run_id == seed,
          {**same_run, **{name: _noisy(metrics.c[name], night) for name in ("value", "ci_low", "ci_high")}})


# --- measuring ----------------------------------------------------------------------------------

# Runs a command and prints its wall time and the peak RSS of its process tree's largest member.
_MEASURE = """
import json, resource, subprocess, sys, time
started = time.monotonic()
done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
wall = time.monotonic() - started
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024,
                  "exit": done.returncode, "stdout": done.stdout[-1500:], "stderr": done.stderr[-1500:]}))
"""

# The post-run evaluation `prober run` does after storing a run (prober/commands/run.py): SLO
# rules and drift through evaluate_run, the per-target rule states and the baseline resets. Timed
# inside the child, after its imports. The drift tests need scipy.special, not scipy.stats
# (prober/core/stats.py): a process that only evaluates does not load scipy.stats (`prober run`
# has, for its probes' summaries).
_EVALUATE = """
import json, sys, time
from prober.alerting.alerts import evaluate_run
from prober.alerting.baseline import BaselineReads
from prober.alerting.drift import baseline_resets
from prober.alerting.slo_rules import rule_states
from prober.core.config import load_config
from prober.store import Store
import scipy.special  # noqa: F401  (the drift tests load it on first use; `prober run` has by then)
config = load_config(sys.argv[1])
store = Store.open(config.store.url)
run = store.list_runs(limit=1, suite="nightly")[0]
started, cpu = time.monotonic(), time.process_time()
reads = BaselineReads()
evaluation = evaluate_run(store, config, run["id"], sinks=[], reads=reads)
run = store.get_run(run["id"])
rows = store.metrics(run["id"])
probes = sorted({row["probe"] for row in rows})
for target in run["targets"]:
    rule_states(config.slo, run, target, probes, rows)
resets = baseline_resets(store, run, config.drift, reads)
took, cpu = time.monotonic() - started, time.process_time() - cpu
store.close()
print(json.dumps({"evaluate_s": took, "evaluate_cpu_s": cpu, "checked": evaluation.checked,
                  "resets": len(resets)}))
"""


def measure(argv: Sequence[str], cwd: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", _MEASURE, *argv], cwd=cwd, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


def bench_config(workdir: Path, url: str, names: Sequence[str]) -> Path:
    """The fleet's prober.toml: emulator targets of these names, two SLO rules, drift on."""
    path = workdir / f"prober-{'pg' if url.startswith('postgresql') else 'sqlite'}.toml"
    lines = [f'suite_paths = ["{DEMO_SUITES}"]', "[store]", f'url = "{url}"']
    for name in names:
        lines += [f"[targets.{name}]", 'protocol = "openai"', 'model = "emulator-1"', "emulator = { }"]
    lines += ["[[slo]]", 'name = "ttft"', 'metric = "ttft_p50_ms"', "threshold = 3000", "for = 2",
              "[[slo]]", 'name = "deterministic"', 'metric = "divergence_rate"', "threshold = 0.5"]
    path.write_text("\n".join(lines) + "\n")
    return path


def commands(config: Path, out: Path, target: str, newest_run: str) -> dict[str, list[str]]:
    """Item 1 of issue 31: every command a fleet user runs daily, by the name the table prints."""
    prober = [sys.executable, "-m", "prober"]
    cfg = ["--config", str(config)]
    history = [*prober, "history", "--metric", HISTORY_METRIC, "--target", target, "--since", "365d", *cfg]
    return {
        # (the first report draws a page for each of the window's newest runs; the next one, as
        # every nightly report does, keeps them and redraws their verdict and banner)
        "report --since 30d (first)": [*prober, "report", "--since", "30d", "--out", str(out / "report30"), *cfg],
        "report --since 30d": [*prober, "report", "--since", "30d", "--out", str(out / "report30"), *cfg],
        # (the first report over a year also aggregates and keeps every week's summaries, once;
        # prober/reports/period_summaries.py)
        "report --since 365d (first)": [*prober, "report", "--since", "365d", "--out", str(out / "report365"), *cfg],
        "report --since 365d": [*prober, "report", "--since", "365d", "--out", str(out / "report365"), *cfg],
        f"history {HISTORY_METRIC} 365d": history,
        f"history {HISTORY_METRIC} 365d --all": [*history, "--all"],
        # (the first evaluation derives the drift values of the baselines' runs from their metric
        # rows and keeps them, as the first night after an upgrade does; every later night derives
        # only its own run's, which the second shows, and `show` reads the kept ones)
        "post-run evaluation (first)": [sys.executable, "-c", _EVALUATE, str(config)],
        "post-run evaluation": [sys.executable, "-c", _EVALUATE, str(config)],
        "show RUN": [*prober, "show", newest_run, *cfg],
        # (one site's runs: a target probed from two sites has two series, compare wants one)
        "compare --since 14d --until 7d": [*prober, "compare", "--target", target, "--since", "14d", "--until", "7d",
                                           "--site", site_names(1)[0], *cfg],
        "export csv --since 7d": [*prober, "export", "--format", "csv", "--since", "7d", "--out",
                                  str(out / "csv7"), *cfg],
        "export csv --since 30d": [*prober, "export", "--format", "csv", "--since", "30d", "--out",
                                   str(out / "csv30"), *cfg],
        "export parquet --since 30d": [*prober, "export", "--format", "parquet", "--since", "30d", "--out",
                                       str(out / "parquet30"), *cfg],
        "export prometheus": [*prober, "export", "--format", "prometheus", "--out", str(out / "prom"), *cfg],
        "status": [*prober, "status", *cfg],
    }


def store_bytes(url: str) -> int:
    """The database's size on disk (SQLite: after a checkpoint, so the WAL holds nothing)."""
    store = Store.open(url)
    try:
        if store.backend == "sqlite":
            with store.engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        return store.size_bytes()
    finally:
        store.close()


def plan_queries(newest_run: str, target: str, since: dt.datetime) -> dict[str, sa.Select[Any]]:
    """The reads the window's commands repeat per run, as the store builds them: each must be an
    index search, never a scan of samples or metrics."""
    return {
        "window runs (runs.started_at >= since)": sa.select(runs.c.id).where(runs.c.started_at >= since)
        .order_by(runs.c.started_at, runs.c.id),
        "a run's metrics of one target (report)": sa.select(metrics).where(metrics.c.run_id == newest_run,
                                                                           metrics.c.target == target),
        "a run's rows of one metric (history)": sa.select(metrics.c.value).where(metrics.c.run_id == newest_run,
                                                                                 metrics.c.name == HISTORY_METRIC),
        "a run's samples (export)": sa.select(samples).where(samples.c.run_id == newest_run),
        "a run's sample counts (run header)": sa.select(samples.c.run_id, sa.func.count())
        .where(samples.c.run_id == newest_run).group_by(samples.c.run_id),
    }


def explain_plans(url: str, newest_run: str, target: str) -> list[str]:
    """EXPLAIN QUERY PLAN (SQLite) or EXPLAIN ANALYZE (PostgreSQL) of `plan_queries`, a line each."""
    store = Store.open(url)
    lines = []
    try:
        since = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
        with store.engine.connect() as conn:
            for what, query in plan_queries(newest_run, target, since).items():
                sql = str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
                prefix = "EXPLAIN QUERY PLAN " if store.backend == "sqlite" else "EXPLAIN (ANALYZE, COSTS OFF) "
                plan = [" ".join(str(part) for part in row[-1:]) for row in conn.exec_driver_sql(prefix + sql)]
                lines.append(f"plan {what}: {' | '.join(plan)}")
    finally:
        store.close()
    return lines


@dataclass
class Row:
    backend: str
    what: str
    wall_s: float | None = None
    rss_mb: float | None = None
    note: str = ""
    cpu_s: float | None = None
    sites: int = 0


def _measured(backend: str, what: str, argv: Sequence[str], workdir: Path, note: str = "") -> Row:
    found = measure(argv, workdir)
    if found["exit"] not in (0, 1):
        note = f"exit {found['exit']}: {found['stderr'].strip()[-200:]}"
    elif what.startswith("post-run evaluation"):
        inner = json.loads(found["stdout"].strip().splitlines()[-1])
        note = (f"evaluation alone {inner['evaluate_s']:.2f} s, {inner['evaluate_cpu_s']:.2f} s CPU "
                f"(after imports); {inner['checked']} checks, {inner['resets']} baseline resets")
    elif what.startswith("prune"):
        note = f"{note}; {found['stdout'].strip()[-160:]}"
    print(f"{backend} {what}: {found['wall_s']:.2f} s, {found['cpu_s']:.2f} s CPU, {found['rss_mb']:.0f} MB {note}",
          file=sys.stderr, flush=True)
    return Row(backend, what, found["wall_s"], found["rss_mb"], note, found["cpu_s"])


def bench_backend(backend: str, url: str, workdir: Path, nights: int, targets: int, template: Template,
                  skip: Sequence[str] = (), sites: int = 2) -> list[Row]:
    names = target_names(targets)
    started = time.monotonic()
    written = write_history(url, nights, targets, template, sites=sites)
    rows = [Row(backend, "write history", time.monotonic() - started, None,
                f"{nights} nights x {targets} targets x {sites} sites")]
    config = bench_config(workdir, url, names)
    out = workdir / f"out-{backend}"
    newest = written[-1] if written else run_id(night_start(nights - 1, nights, dt.datetime.now(dt.UTC)))
    for what, argv in commands(config, out, names[0], newest).items():
        if not any(what.startswith(prefix) for prefix in skip):
            rows.append(_measured(backend, what, argv, workdir))
    for line in explain_plans(url, newest, names[0]):
        print(f"{backend} {line}", file=sys.stderr, flush=True)
    size = store_bytes(url)
    rows.append(Row(backend, "store size", None, None, f"{size / 1e6:,.0f} MB, {size / 1e6 / nights:.2f} MB/night"))
    prune = [sys.executable, "-m", "prober", "prune", "--config", str(config)]
    first = _measured(backend, "prune first (a year)", prune, workdir)
    after = store_bytes(url)
    first.note = f"{after / 1e6:,.0f} MB, {after / 1e6 / nights:.2f} MB/night" + first.note
    # The next night's prune: one more night falls out of the default 14 days' samples.
    nightly = _measured(backend, "prune nightly", [*prune, "--samples-older-than", "13d"], workdir)
    return [replace(row, sites=sites) for row in [*rows, first, nightly]]


def print_scaling(rows: Sequence[Row]) -> None:
    """Per backend and command, CPU seconds at each number of sites and the growth per site: the
    CPU seconds at the most sites over those at the fewest, divided by the ratio of sites (1.00:
    linear in the sites; under 1: less, the fixed cost of imports and the runs list)."""
    counts = sorted({row.sites for row in rows if row.sites})
    if len(counts) < 2:
        return
    print(f"\n{'backend':<10} {'what':<32} " + " ".join(f"{f'CPU s x{n}':>10}" for n in counts) + "  growth per site")
    measured: dict[tuple[str, str], dict[int, float]] = {}
    for row in rows:
        if row.sites and row.cpu_s is not None:
            measured.setdefault((row.backend, row.what), {})[row.sites] = row.cpu_s
    for (backend, what), by_sites in measured.items():
        cells = " ".join(f"{by_sites[n]:10.2f}" if n in by_sites else f"{'':>10}" for n in counts)
        few, most = min(by_sites), max(by_sites)
        growth = (by_sites[most] / by_sites[few]) / (most / few) if most > few and by_sites[few] else float("nan")
        print(f"{backend:<10} {what:<32} {cells}  {growth:.2f}")


def print_table(rows: Sequence[Row]) -> None:
    print(f"{'backend':<10} {'sites':>5} {'what':<32} {'wall s':>8} {'CPU s':>7} {'peak MB':>8}  note")
    for row in rows:
        wall = "" if row.wall_s is None else f"{row.wall_s:8.2f}"
        cpu = "" if row.cpu_s is None else f"{row.cpu_s:7.2f}"
        rss = "" if row.rss_mb is None else f"{row.rss_mb:8.0f}"
        print(f"{row.backend:<10} {row.sites or '':>5} {row.what:<32} {wall:>8} {cpu:>7} {rss:>8}  {row.note}")


def closing_line(rows: Sequence[Row]) -> str:
    """The benchmark's last line: the worst CPU seconds and peak memory over the commands of
    issue 31's item 1 (every measured command but prune), the first prune's wall time and the
    store size per night after it, each the largest over the backends."""
    commands_run = [row for row in rows if row.cpu_s is not None and not row.what.startswith("prune")]
    first_prunes = [row.wall_s or 0.0 for row in rows if row.what.startswith("prune first")]
    per_night = [float(row.note.split(", ")[1].split()[0]) for row in rows if row.what.startswith("prune first")]
    return (f"history-scale: worst_cpu_s={max((r.cpu_s or 0.0 for r in commands_run), default=0):.1f} "
            f"worst_peak_mb={max((r.rss_mb or 0.0 for r in commands_run), default=0):.0f} "
            f"prune_first_s={max(first_prunes, default=0):.1f} db_mb_per_night={max(per_night, default=0):.2f}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--targets", type=int, default=20)
    parser.add_argument("--sites", default="2", help="sites probing every target each night; a list (1,2,4) "
                        "measures each in its own store and prints how each command grows with the sites")
    parser.add_argument("--backends", default="sqlite,postgresql", help="sqlite, postgresql or both")
    parser.add_argument("--template", help="store URL holding a complete nightly run (default: run one now)")
    parser.add_argument("--workdir", type=Path, help="keep the stores here (default: a temporary directory); "
                        "a store there already holding some nights gets only the missing ones")
    parser.add_argument("--skip", action="append", default=[], metavar="PREFIX",
                        help="leave out the commands whose row starts with this (e.g. report); repeatable")
    args = parser.parse_args(argv)
    try:
        site_counts = sorted({int(part) for part in args.sites.split(",") if part.strip()})
    except ValueError:
        parser.error(f"--sites {args.sites!r}: a number of sites, or a list such as 1,2,4")
    if args.nights < 1 or args.targets < 1 or not site_counts or not all(1 <= n <= 26 for n in site_counts):
        parser.error("--nights and --targets must be at least 1, --sites 1 to 26")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not set(backends) <= {"sqlite", "postgresql"}:
        parser.error("--backends: sqlite, postgresql or both")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="prober-history-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    template = load_template(args.template or make_template(workdir))
    print(f"template: {len(template.samples)} samples and {len(template.metrics)} metrics per target-night",
          file=sys.stderr)
    rows: list[Row] = []
    cluster = None
    try:
        for backend in backends:
            if backend == "postgresql":
                from tests.support.postgres import PostgresCluster

                cluster = PostgresCluster()
                cluster.start()
            for sites in site_counts:
                # (one store per number of sites; a single count keeps the names it always had)
                suffix = "" if len(site_counts) == 1 else f"_{sites}sites"
                url = (f"sqlite:///{workdir / f'history{suffix}.db'}" if backend == "sqlite" else
                       cluster.create_database(f"history_scale{suffix}"))
                where = workdir if len(site_counts) == 1 else workdir / f"{sites}sites"
                where.mkdir(exist_ok=True)
                rows += bench_backend(backend, url, where, args.nights, args.targets, template, args.skip, sites)
    finally:
        if cluster is not None:
            cluster.stop()
    print_table(rows)
    print_scaling(rows)
    print(closing_line(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
