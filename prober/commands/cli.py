"""The `prober` command: a thin shell over the runner, the store and the local endpoint."""

from __future__ import annotations

import os
import socket
import sys
import tomllib
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, cast

if TYPE_CHECKING:

    from prober.core.config import ProberConfig

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from prober.commands.store_access import require_known_target, require_run
from prober.commands.terminal import FLAG_MARKER, print_metrics, text_column, value_column
from prober.commands.terminal import fmt as _fmt
from prober.commands.terminal import shown as _shown
from prober.core.config import load_config
from prober.core.errors import ConfigError, ProberError
from prober.core.records import label_text
from prober.core.redact import RedactingStream, register_config
from prober.run.store_access import open_store

# Subcommands inherit the context settings: `-h` is `--help` everywhere.
_HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None, pretty_exceptions_enable=False,
                  context_settings=_HELP_OPTIONS, help="Black-box conformance and drift prober for LLM APIs.")
local_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="Manage the local llama-server endpoint (SmolLM2-135M-Instruct).")
app.add_typer(local_app, name="local")
baseline_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                           help="Accept a metric's level as its new normal for drift, undo it, list accepts.")
app.add_typer(baseline_app, name="baseline")


def _print_version(wanted: bool) -> None:
    if wanted:
        from prober import __version__

        out.print(f"prober {__version__}")
        raise typer.Exit(0)


# typer takes options of the program itself (before any command) only through a callback.
@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                                   help="print the version and exit")] = False) -> None:
    pass

# Cron and CI capture stdout: without a terminal rich would assume 80 columns and squeeze the
# value columns of a metrics table away, so give captured output room unless COLUMNS says otherwise.
_CAPTURED_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
# Both consoles mask the configured secrets in everything they write (prober/core/redact.py);
# soft_wrap: an error is one line however long, so cron logs and grep see it whole.
# (RedactingStream passes everything but write through to the real stream, hence the cast.)
out = Console(file=cast(IO[str], RedactingStream()), highlight=False, width=_CAPTURED_WIDTH)
err = Console(file=cast(IO[str], RedactingStream(stderr=True)), stderr=True, highlight=False, soft_wrap=True)

ConfigOption = Annotated[Path | None, typer.Option("--config", "-c", help="prober.toml to use "
                         "(default: ./prober.toml if present, else built-in targets local, emulator, "
                         "emulator-openai, and local-responses and emulator-responses for the Responses API)")]
# PROBER_DB: a store URL with a password stays off the command line (ps, a pod's spec).
DbOption = Annotated[str | None, typer.Option("--db", envvar="PROBER_DB",
                                              help="store URL, overriding the config's [store] url")]


def _config(path: Path | None, db: str | None = None) -> ProberConfig:
    from prober.alerting.slo_rules import check_rules_known

    config = load_config(path)
    check_rules_known(config.slo, config.source)
    if db:
        config.store.url = db
    register_config(config)
    return config


def _url_shown(url: str) -> str:
    """A URL for the terminal: a password in it masked whatever its length."""
    from prober.store.engine import redacted

    return _shown(redacted(url))


def _parse_param(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise ConfigError(f"--param {text!r}: expected KEY=VALUE")
    key, raw = text.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw   # a bare word is a string
    return key.strip(), value


@app.command()
def run(
    suite: Annotated[str, typer.Option("--suite", "-s", help="suite name (see `prober suites`)")],
    target: Annotated[list[str] | None, typer.Option("--target", "-t", help="target name; repeatable; "
                                                        "default: every configured target")] = None,
    param: Annotated[list[str] | None, typer.Option("--param", "-p", help="override a probe "
                                                       "parameter, KEY=VALUE (TOML value); repeatable")] = None,
    config: ConfigOption = None,
    db: DbOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print per target the requests, tokens and (with "
                                          "pricing) cost the run would send; send and write nothing")] = False,
    shard: Annotated[str | None, typer.Option("--shard", help="I/N: run only the I-th of N slices of the "
                                              "targets (I from 0, as JOB_COMPLETION_INDEX; sorted by name, "
                                              "dealt round-robin)")] = None,
    batch: Annotated[str | None, typer.Option("--batch", help="the scheduled night this run belongs to "
                                              "(default: $PROBER_BATCH); `prober report --batch` shows "
                                              "all its runs")] = None,
    summary: Annotated[bool, typer.Option("--summary", help="only the per-target verdict lines on stdout, "
                                          "everything else on stderr (for cron: docs/operations.md)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="the final verdicts as one JSON document on stdout "
                                          "(schema prober.run/1, docs/json-output.md), everything else on "
                                          "stderr")] = False,
) -> None:
    """Run a suite against targets and store every sample.

    Example: prober run --suite latency --target local

    Exit codes: 0 no alert fired (every SLO held, or a broken one is still pending: a rule with
    `for = N` fires on its Nth consecutive breaking run, and each target's last line names what is
    pending); 1 an alert fired (an SLO rule or a drift test); 2 usage or configuration error; 3 the
    run could not complete (unreachable endpoint, error ceiling, budget, interrupted).
    """
    from prober.commands.run import run_and_judge, run_batch, shard_selection

    if summary and as_json:
        raise ConfigError("--summary and --json: choose one (both decide what stdout carries)")
    cfg = _config(config, db)
    overrides = dict(_parse_param(p) for p in (param or []))
    batch_id = run_batch(batch)
    names = shard_selection(cfg, target or None, shard)
    if names == []:
        err.print(f"shard {_shown(shard)}: no target falls to this shard (fewer targets than shards); nothing to run")
        raise typer.Exit(0)
    if dry_run:
        from prober.commands.dry_run import plan_run, show_plan

        show_plan(out, cfg, *plan_run(cfg, suite, names, overrides))
        raise typer.Exit(0)
    result = run_and_judge(cfg, err, suite, names, overrides, batch=batch_id)
    # With --summary or --json stdout carries only the verdicts: cron mails them, a script parses them.
    detail = err if summary or as_json else out
    print_metrics(detail, result.metrics, title=f"run {result.run_id} ({result.status})")
    for problem in result.problems:
        err.print(f"problem: {_shown(problem)}")
    if result.alerts is not None:
        from prober.alerting.alerts import describe

        for line in describe(result.alerts):
            detail.print(_shown(line))
    from prober.alerting.slo_rules import target_lines

    for line in result.warnings:
        err.print(_shown(line))
    firing = result.alerts.firing if result.alerts else []
    pending = result.alerts.pending if result.alerts else []
    if as_json:
        from prober.commands.json_output import run_verdicts, write_document

        write_document(out.file, run_verdicts(result.run_id, suite, result.status, result.exit_code, result.targets,
                                              result.slo_states, firing, pending))
    else:
        for line in target_lines(result.targets, result.slo_states, firing, pending):
            out.print(_shown(line), soft_wrap=True)
    err.print(f"{result.samples} samples stored in {_url_shown(cfg.store.url)}; run id {result.run_id}; "
              f"{len(result.metrics)} metrics")
    raise typer.Exit(result.exit_code)


@app.command()
def suites(config: ConfigOption = None) -> None:
    """List the suites on the search path.

    Example: prober suites
    """
    from prober.suites.loader import available_suites, load_suite

    cfg = _config(config)
    table = Table("suite", "probes", "description", "file")
    for name, path in available_suites(cfg.suite_paths).items():
        suite = load_suite(name, cfg.suite_paths)
        table.add_row(_shown(name), _shown(", ".join(dict.fromkeys(e.probe.name for e in suite.entries))),
                      _shown(suite.description), _shown(path))
    out.print(table)


@app.command()
def targets(config: ConfigOption = None) -> None:
    """List the configured targets.

    Example: prober targets --config prober.toml
    """
    cfg = _config(config)
    table = Table("target", "protocol", "base_url", "model", "api key from", "max concurrency")
    for name, t in cfg.targets.items():
        url = "(in-process emulator)" if t.is_emulator else _url_shown(t.base_url or "")
        table.add_row(_shown(name), t.protocol, url,
                      _shown(t.model), _shown(t.api_key_env or "-"), str(t.max_concurrency))
    out.print(table)


@app.command()
def runs(
    limit: Annotated[int, typer.Option(help="how many runs")] = 20,
    suite: Annotated[str | None, typer.Option(help="only this suite")] = None,
    site: Annotated[str | None, typer.Option(help="only runs probed from this site")] = None,
    batch: Annotated[str | None, typer.Option(help="only runs of this batch (`prober run --batch`)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON document (schema prober.runs/1, "
                                          "docs/json-output.md)")] = False,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """List recent runs with their site, status and sample counts.

    Example: prober runs --limit 5 --site fra
    """
    cfg = _config(config, db)
    store = open_store(cfg.store.url, err, create=False)
    try:
        rows = store.list_runs(limit=limit, suite=suite, site=site, batch=batch)
    finally:
        store.close()
    if as_json:
        from prober.commands.json_output import runs_document, write_document

        write_document(out.file, runs_document(rows))
        return
    from prober.reports.run_lines import target_status_text

    # fits 80 columns: ids, times and counts whole, the words (suite, status, reasons) wrapped
    table = Table(Column("run", no_wrap=True), text_column("suite"), text_column("site"),
                  Column("started (UTC)", no_wrap=True),
                  Column("status", no_wrap=True), value_column("samples\n(errors)"), text_column("targets"))
    for r in rows:
        table.add_row(_shown(r["id"]), _shown(r["suite"]), _shown(r.get("site") or ""),
                      r["started_at"].strftime("%Y-%m-%d %H:%M"),
                      _shown(r["status"]), f"{r.get('sample_count', 0)} ({r.get('error_count', 0)})",
                      _shown(target_status_text(r)))
    out.print(table)


@app.command()
def show(
    run_id: Annotated[str, typer.Argument(help="run id, a unique prefix of one, or `latest`")],
    probe: Annotated[str | None, typer.Option("--probe", help="only this probe's metrics")] = None,
    target: Annotated[str | None, typer.Option("--target", "-t", help="only this target's metrics; with "
                                               "`latest`, the newest run of this target")] = None,
    label: Annotated[list[str] | None, typer.Option("--label", "-l", help="KEY=VALUE: only metrics with "
                                                     "this label; repeatable or comma-separated")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON document (schema prober.show/1, "
                                          "docs/json-output.md)")] = False,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Show a run: each target's status (and why it failed), what each suite entry measured
    (probe version, effective parameters), its metrics, and the state of every SLO rule.

    Example: prober show 3f2a9c --probe caching --label case=repeat; prober show latest --target local
    """
    from prober.commands.show import show_run

    show_run(_config(config, db), run_id, out, err, probe, label or [], target, as_json)


SinceOption = Annotated[str | None, typer.Option("--since", help="runs started within this period "
                       "(30d, 12h, 2w, 90m) or since a date (2026-01-31)")]


@app.command()
def report(
    since: Annotated[str | None, typer.Option("--since", help="runs started within this period (30d, 12h, "
                     "2w, 90m) or since a date (2026-01-31); default 30d, or any time with --batch")] = None,
    target: Annotated[str | None, typer.Option("--target", "-t", help="only this target")] = None,
    batch: Annotated[str | None, typer.Option("--batch", help="only the runs of this batch: one scheduled night "
                                              "of the whole fleet, every site and shard")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="html, md or json")] = "html",
    out_dir: Annotated[Path, typer.Option("--out", help="directory to write the report into")] = Path("prober-reports"),
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Write a report: per target and suite, the latest metrics against their SLOs, trends over
    time, each suite's charts and a few sample outputs. HTML maintains a site in OUT
    (index.html, latest.html, runs/<run>.html); md and json write one timestamped file. The last
    line printed is the path of the index or the file.

    Example: prober report --since 30d --format html --out /var/www/prober
    (or: prober report --batch 2026-12-01 --format md, the whole fleet's night)
    """
    from prober.alerting.verdicts import ReportVerdicts
    from prober.core.collector import collector_paused
    from prober.reports.collect import collect, load_window, parse_since
    from prober.reports.render import RENDERERS, write_report
    from prober.reports.site import write_site

    if fmt not in RENDERERS:
        raise ConfigError(f"--format {fmt!r}: expected one of {', '.join(RENDERERS)}")
    cfg = _config(config, db)
    start = parse_since(since if since is not None or batch is not None else "30d")
    verdicts = ReportVerdicts(cfg.slo, cfg.drift)
    store = open_store(cfg.store.url, err, create=False)
    try:
        require_known_target(store, cfg, target)
        if batch is not None and not store.list_runs(limit=1, batch=batch):
            raise ConfigError(f"--batch {batch!r}: no run of this batch in {_url_shown(cfg.store.url)}")
        with collector_paused():       # (prober/core/collector.py: a third of a year's report was collections)
            window = load_window(store, start, target, batch=batch)     # read once: the report and its run pages
            collected = collect(store, verdicts, start, target, window=window, batch=batch,
                                expected=list(cfg.targets))
            path = write_site(store, verdicts, collected, out_dir, window) if fmt == "html" else None
    finally:
        store.close()
    path = path or write_report(collected, fmt, out_dir)
    broken = sum(1 for section in collected.sections for _, result in section.slo_results if result.broken)
    err.print(f"{len(collected.sections)} target/suite section(s), {broken} SLO result(s) broken")
    out.print(escape(str(path)), soft_wrap=True)


@app.command()
def status(
    since: Annotated[str, typer.Option("--since", help="runs started within this period (30d, 12h, 2w, 90m) "
                                       "or since a date (2026-01-31)")] = "30d",
    target: Annotated[str | None, typer.Option("--target", "-t", help="only this target")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="the rows as a JSON array, for scripts")] = False,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Print the verdict per target and site (healthy, SLO broken, drifting, failed, no data),
    since which run, and why: the table every report opens with. Exit 0 when every target is
    healthy, 1 otherwise.

    Example: prober status --json | jq '.[] | select(.state != "healthy")'
    """
    from prober.commands.status import status_command

    raise typer.Exit(status_command(_config(config, db), out, err, since, target, as_json))


@app.command()
def history(
    metric: Annotated[str, typer.Option("--metric", "-m", help="metric name, e.g. ttft_p50_ms")],
    target: Annotated[str | None, typer.Option("--target", "-t", help="only this target")] = None,
    suite: Annotated[str | None, typer.Option("--suite", "-s", help="only runs of this suite, or "
                                                 "metrics of this probe")] = None,
    label: Annotated[list[str] | None, typer.Option("--label", "-l", help="KEY=VALUE label filter; "
                                                       "repeatable or comma-separated")] = None,
    # The spelling before `--label` was everywhere: still accepted, no longer shown.
    labels_alias: Annotated[list[str] | None, typer.Option("--labels", hidden=True)] = None,
    since: SinceOption = None,
    every_run: Annotated[bool, typer.Option("--all", help="a row per run even over a long window (default: "
                                            "more than 100 values are summarized per week)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="every value as one JSON document (schema "
                                          "prober.history/1, docs/json-output.md), never summarized")] = False,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Print a metric's values over time, oldest run first; over a long window one row per week
    (min, median, max) unless --all.

    Example: prober history --metric ttft_p50_ms --target local --label concurrency=16
    """
    from prober.reports.collect import parse_since
    from prober.reports.history import SUMMARIZE_ABOVE, metric_over_time, parse_label_filters
    from prober.reports.svg import interval_text

    cfg = _config(config, db)
    wanted = parse_label_filters([*(label or []), *(labels_alias or [])])
    start = parse_since(since)
    store = open_store(cfg.store.url, err, create=False)
    try:
        rows = metric_over_time(store, metric, target=target, suite=suite, labels=wanted, since=start)
    finally:
        store.close()
    if as_json:
        from prober.commands.json_output import history_document, write_document

        write_document(out.file, history_document(metric, rows))
        return
    if not every_run and len(rows) > SUMMARIZE_ABOVE:
        from prober.commands.history import print_weekly

        print_weekly(out, metric, rows)
        return
    # 80 columns: a column whose value is the same on every row (one target, one suite) moves into
    # the title; words wrap, and the interval wraps at its " .. ".
    headers = {"suite": "suite", "target": "target", "run_site": "site", "unit": "unit", "run_status": "run status"}
    constant = {key: rows[0][key] for key in headers if len({r[key] for r in rows}) == 1}
    title = ", ".join([_shown(metric), *(f"{headers[k]} {_shown(v)}" for k, v in constant.items() if v)])
    before = [key for key in ("suite", "target", "run_site") if key not in constant]
    after = [key for key in ("unit", "run_status") if key not in constant]
    table = Table(Column("run started (UTC)", no_wrap=True), Column("run", no_wrap=True),
                  *(text_column(headers[key]) for key in before), text_column("labels"),
                  Column("value", no_wrap=True), text_column("95% CI"), Column("n", no_wrap=True),
                  *(text_column(headers[key]) for key in after), title=title)
    for r in rows:
        ci = interval_text(r["ci_low"], r["ci_high"], r.get("flags"))
        table.add_row(r["run_started_at"].strftime("%Y-%m-%d %H:%M"), _shown(r["run_id"]),
                      *(_shown(r[key]) for key in before),
                      _shown(label_text(r["labels"])),
                      _fmt(r["value"]) + (f" {FLAG_MARKER}" if r.get("flags") else ""), ci,
                      "" if r["n"] is None else str(r["n"]), *(_shown(r[key] or "") for key in after))
    out.print(table)


@app.command()
def compare(
    runs: Annotated[list[str] | None, typer.Argument(help="two run ids (or unique prefixes, or `latest`): "
                                                      "A, then B")] = None,
    target: Annotated[list[str] | None, typer.Option("--target", "-t", help="two targets (A, B), or one "
                                                        "target's two windows with --until")] = None,
    since: SinceOption = None,
    until: Annotated[str | None, typer.Option("--until", help="with one --target: A is --since to this, "
                                                 "B this to now")] = None,
    suite: Annotated[str | None, typer.Option("--suite", "-s", help="only runs of this suite")] = None,
    site: Annotated[list[str] | None, typer.Option("--site", help="windows: only runs from this site; twice "
                                                   "with one --target: site A against site B")] = None,
    metric: Annotated[list[str] | None, typer.Option("--metric", "-m", help="only this metric; repeatable")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, markdown, json or html")] = "table",
    out_path: Annotated[Path | None, typer.Option("--out", help="write to this file")] = None,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Compare two runs, two targets or two windows: every metric both have, the difference with
    its 95% interval and a test, strongest evidence first (*: significant, q <= 0.05 and at least
    the [drift] min_effect).

    Example: prober compare 3f2a9c 8b1d07 --format html --out compare.html
    """
    from prober.commands.compare import compare_command

    compare_command(_config(config, db), out, err, _shown, runs or [], target or [], since, until, suite, fmt,
                    out_path, metric or [], site or [])


@app.command()
def samples(
    run_id: Annotated[str, typer.Argument(help="run id, a unique prefix of one, or `latest`")],
    target: Annotated[str | None, typer.Option("--target", "-t", help="only this target")] = None,
    label: Annotated[list[str] | None, typer.Option("--label", "-l", help="KEY=VALUE label filter; "
                                                       "repeatable or comma-separated")] = None,
    errors: Annotated[bool, typer.Option("--errors", help="only requests that failed")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object a line, whole output")] = False,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Show a run's requests: timings, usage, findings and (escaped) output, in the order sent.

    Example: prober samples 3f2a9c --label concurrency=16 --errors
    """
    from prober.commands.samples import samples_command

    samples_command(_config(config, db), out, err, _shown, run_id, target, label or [], errors, as_json)


class PushError(ProberError):
    """The Pushgateway could not be reached or refused the push; the textfile is written."""

    exit_code = 3


def _push_textfile(base_url: str, text: str, site: str) -> None:
    """POST the textfile to a Pushgateway through the alert sinks' sender (prober's transport):
    the gateway replaces, in this site's group, every family the text names."""
    import asyncio

    from prober.alerting.sinks import DeliveryError, post
    from prober.reports.prometheus import pushgateway_url

    url = pushgateway_url(base_url, site)
    try:
        status, answer = asyncio.run(post(url, text.encode(), {"Content-Type": "text/plain; version=0.0.4"},
                                          timeout=30.0))
    except DeliveryError as exc:
        raise PushError(f"--push {base_url}: {exc}") from None
    if status // 100 != 2:
        raise PushError(f"--push {base_url}: the Pushgateway answered {status}: {answer.strip()[:300]}")
    err.print(f"pushed to {_shown(base_url)} as job=prober instance={_shown(site)}")


@app.command()
def export(
    fmt: Annotated[str, typer.Option("--format", "-f", help="csv, parquet or prometheus")],
    out_dir: Annotated[Path, typer.Option("--out", help="directory to write into")] = Path("prober-export"),
    since: SinceOption = None,
    run_id: Annotated[str | None, typer.Option("--run", help="only this run (id, unique prefix or `latest`)")] = None,
    target: Annotated[str | None, typer.Option("--target", "-t", help="only this target")] = None,
    push: Annotated[str | None, typer.Option("--push", help="prometheus only: also push the series to this "
                                             "Pushgateway (http://host:9091)")] = None,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Export samples and metrics (csv, parquet), or the latest complete run of each target and
    suite as a node_exporter textfile (prometheus: OUT/prober.prom), optionally pushed to a
    Prometheus Pushgateway as job `prober`, instance = this site. The SLO series come from the
    rules of --config (default ./prober.toml); without rules a note on stderr says none were exported.

    Example: prober export --format prometheus --out /var/lib/node_exporter/textfile_collector
    """
    from prober.reports.collect import parse_since
    from prober.reports.export import TABLE_FORMATS, export_tables
    from prober.reports.prometheus import describe, exposition, recent_runs

    if fmt not in (*TABLE_FORMATS, "prometheus"):
        raise ConfigError(f"--format {fmt!r}: expected one of {', '.join(TABLE_FORMATS)}, prometheus")
    if push is not None and fmt != "prometheus":
        raise ConfigError(f"--push: only with --format prometheus, not {fmt}")
    cfg = _config(config, db)
    start = parse_since(since)
    if fmt == "parquet":   # a missing extra is said first: installing it is what the user must do
        from prober.core.extras import require_extra

        require_extra("pyarrow", "parquet", "Parquet export needs")
    store = open_store(cfg.store.url, err, create=False)
    try:
        if run_id is not None:
            run_id = require_run(store, run_id, target)["id"]
        if fmt == "prometheus":
            from prober.alerting.verdicts import ReportVerdicts

            # Only the rows of each target's newest complete run, however long the history.
            rows = store.metric_history(pairs=store.latest_complete_runs(since=start, target=target, run_id=run_id))
            text = exposition(rows, runs=recent_runs(store, since=start, run_id=run_id, target=target),
                              alerts=store.alerts(), verdicts=ReportVerdicts(cfg.slo))
            out_dir.mkdir(parents=True, exist_ok=True)
            path = out_dir / "prober.prom"
            # node_exporter may read the directory at any moment: write aside, then rename.
            partial = out_dir / ".prober.prom.partial"
            partial.write_text(text, encoding="utf-8")
            partial.replace(path)
            err.print(f"exported {_shown(describe(rows))}")
            if not cfg.slo:   # the SLO series come from the config's rules: say why there are none
                where = ("no --config given and no ./prober.toml" if cfg.source.startswith("<")
                         else f"{cfg.source} has no [[slo]] rules")
                err.print(f"note: exported no SLO series (prober_slo_broken): {_shown(where)}; pass --config "
                          "with the prober.toml that `prober run` uses")
            written = [path.resolve()]
            if push is not None:
                _push_textfile(push, text, cfg.run_site(socket.gethostname()))
        else:
            written = export_tables(store, fmt, out_dir, since=start, run_id=run_id, target=target)
    finally:
        store.close()
    for path in written:
        out.print(escape(str(path)), soft_wrap=True)


@app.command()
def prune(
    samples_older_than: Annotated[str | None, typer.Option("--samples-older-than", help="drop the samples of "
                                                           "runs started longer ago than this (e.g. 90d)")] = None,
    outputs_older_than: Annotated[str | None, typer.Option("--outputs-older-than", help="clear only the output "
                                                           "text of samples older than this (e.g. 30d)")] = None,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Drop raw samples (or only their output text) past an age; runs and metrics are kept for
    ever. Without flags, applies [retention] from prober.toml (default: samples older than 14 days).
    Safe while a run writes: a running run is never touched.

    Example: prober prune --samples-older-than 90d --outputs-older-than 30d
    """
    from prober.commands.prune import prune_command

    prune_command(_config(config, db), out, err, samples_older_than, outputs_older_than)


@baseline_app.command("accept")
def baseline_accept(
    target: Annotated[str, typer.Option("--target", help="the target whose level is the new normal")],
    metric: Annotated[str | None, typer.Option("--metric", help="one metric family (e.g. ttft_ms, hit_rate); "
                                                "default every metric of the target")] = None,
    since: Annotated[str | None, typer.Option("--since", help="normal from this date (2026-01-31) or period "
                                               "ago (3d); default the start of its open drift, else now")] = None,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Accept a target's metric level as its normal: its drift baseline starts at --since and its
    open drift alerts close with a "new_normal" notice. Recorded; `prober baseline revoke` undoes it.

    Example: prober baseline accept --target prod --metric ttft_ms --since 2026-03-02
    """
    from prober.commands.baseline import accept_command

    accept_command(_config(config, db), out, err, target, metric, since)


@baseline_app.command("revoke")
def baseline_revoke(
    accept_id: Annotated[int, typer.Argument(help="the accept's number (prober baseline list)")],
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Undo an accept: the metric's baseline takes its earlier runs again.

    Example: prober baseline revoke 3
    """
    from prober.commands.baseline import revoke_command

    revoke_command(_config(config, db), out, err, accept_id)


@baseline_app.command("list")
def baseline_list(
    target: Annotated[str | None, typer.Option("--target", help="only this target")] = None,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """List the baseline accepts in force for this site.

    Example: prober baseline list --target prod
    """
    from prober.commands.baseline import list_command

    list_command(_config(config, db), out, err, target)


@app.command("drift-power")
def drift_power(
    target: Annotated[str, typer.Option("--target", help="the target to state the sensitivity of")],
    suite: Annotated[str, typer.Option("--suite", help="the suite whose newest run is judged")] = "nightly",
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Say what the drift tests can detect on a target: per latency family, its night-to-night
    spread and the smallest shift paged within 2 nights nine times in ten at the page budget.

    Example: prober drift-power --target prod --suite nightly
    """
    from prober.commands.drift_power import drift_power_command

    drift_power_command(_config(config, db), out, err, target, suite)


@app.command()
def init(
    path: Annotated[Path, typer.Option("--path", help="where to write the file")] = Path("prober.toml"),
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing file")] = False,
) -> None:
    """Write a commented example prober.toml: the emulator as the one active target (a first run
    needs no key), Anthropic, OpenAI, vLLM and the local endpoint commented out, to opt in to.

    Example: prober init && prober targets
    """
    if path.exists() and not force:
        raise ConfigError(f"{path}: already exists (use --force to overwrite)")
    example = Path(__file__).parents[1] / "data" / "example.toml"
    path.write_text(example.read_text())
    out.print(f"wrote {escape(str(path))}")


@app.command()
def drill(
    healthy_runs: Annotated[int, typer.Option(min=1, help="healthy runs before the two regressed ones "
                                                         "(the drift baseline)")] = 3,
    config: ConfigOption = None,
    db: Annotated[str | None, typer.Option("--db", help="store URL for the drill's runs (default: a "
                                              "temporary SQLite file, deleted afterwards)")] = None,
    scenario: Annotated[Path | None, typer.Option("--scenario", help="emulator scenario of the regressed run "
                                                  "(e.g. examples/scenarios/regression.toml; default: a "
                                                  "500 ms first token)")] = None,
) -> None:
    """Fire drill: run the latency suite against the emulator, healthy then regressed, and deliver
    the alerts to every sink configured in prober.toml ([[sinks]]), then resolve every alert it
    raised in every sink, so nothing stays active after a drill. Exit 0 when the alert fired and
    every sink accepted it and its resolution, 1 otherwise.

    Example: prober drill --config prober.toml
    """
    from prober.alerting.drill import run_drill
    from prober.commands.run import run_and_judge

    regressed = None
    if scenario is not None:
        from prober.emulator import load_scenario

        load_scenario(scenario)   # a bad file is a usage error before the first run
        regressed = scenario.read_text()
    result = run_drill(_config(config), out, run_and_judge, store_url=db, healthy_runs=healthy_runs,
                       regressed_scenario=regressed)
    raise typer.Exit(0 if result.ok else 1)


@app.command()
def calibrate(
    target: Annotated[str | None, typer.Option("--target", "-t", help="take this target's protocol, model and "
                                               "timeouts (default: OpenAI protocol)")] = None,
    concurrency: Annotated[str | None, typer.Option(help="closed-loop levels, e.g. 1,64,256")] = None,
    rates: Annotated[str | None, typer.Option(help="open-loop rates in requests/s, e.g. 100,400")] = None,
    requests: Annotated[int | None, typer.Option(help="requests per level (default 256)")] = None,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Measure the client's own TTFT and ITL overhead on this machine against an emulator process
    with a fixed schedule; stored as a run of suite `calibrate`. Exit 3 if it could not complete.

    Example: prober calibrate --concurrency 1,64,256 --rates 200
    """
    from prober.commands.calibrate import calibrate as run_calibration
    from prober.commands.calibrate import calibration_params

    cfg = _config(config, db)
    params = calibration_params(concurrency, rates, {} if requests is None else {"requests_per_level": requests})
    result = run_calibration(cfg, err, params, target)
    print_metrics(out, result.metrics, title=f"calibration run {result.run.run_id} ({result.run.status})")
    for problem in result.run.problems:
        err.print(f"problem: {_shown(problem)}")
    raise typer.Exit(result.run.exit_code)


@app.command()
def emulate(
    port: Annotated[int, typer.Option(help="port on 127.0.0.1")] = 8090,
    scenario: Annotated[Path | None, typer.Option(help="scenario TOML (default: built-in)")] = None,
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
) -> None:
    """Serve the emulator (Anthropic /v1/messages and OpenAI /v1/chat/completions) until Ctrl-C.

    Example: prober emulate --port 8090 --scenario slow.toml
    """
    from prober.emulator import serve

    try:
        serve(host, port, str(scenario) if scenario else None)
    except OSError as exc:
        raise ConfigError(f"prober emulate: cannot listen on {host}:{port}: {exc.strerror or exc}") from None


@local_app.command("start")
def local_start(
    port: Annotated[int, typer.Option(help="port on 127.0.0.1")] = 8080,
    slots: Annotated[int | None, typer.Option("--slots", "-np", help="llama-server -np (default: "
                                                 "its auto setting, 4 slots with a unified KV cache)")] = None,
    ctx_size: Annotated[int | None, typer.Option("--ctx-size", "-c", help="llama-server -c")] = None,
) -> None:
    """Install (first time: about 5 minutes on 2 idle cores) and start llama-server with SmolLM2-135M-Instruct.

    Example: prober local start --port 8080 --slots 8
    """
    from prober.local import server as local

    info = local.start(port=port, slots=slots, ctx_size=ctx_size)
    out.print(f"llama-server running: pid {info.pid}, {info.base_url}, log {escape(info.log)}")


@local_app.command("install")
def local_install(
    rebuild: Annotated[bool, typer.Option("--rebuild", help="build llama-server again even if a "
                                          "smoke-tested build with the same flags is cached")] = False,
) -> None:
    """Build llama-server (portable, smoke-tested) and unpack the model into the cache without starting anything.

    Example: prober local install   (cache: $PROBER_CACHE_DIR, default ~/.cache/prober)
    """
    from prober.local import server as local

    out.print(f"llama-server: {escape(str(local.llama_server_binary(rebuild=rebuild)))}")
    out.print(f"model: {escape(str(local.model_path()))}")


@local_app.command("stop")
def local_stop(port: Annotated[int, typer.Option(help="port on 127.0.0.1")] = 8080) -> None:
    """Stop the llama-server started by `prober local start`, or one another cache dir started there.

    Example: prober local stop
    """
    from prober.local import server as local

    if local.stop(port):
        out.print("stopped")
    elif (pid := local.stop_foreign_llama_server(port)) is not None:
        out.print(f"stopped llama-server pid {pid} on port {port} (not started from this cache dir)")
    else:
        out.print(f"no llama-server on port {port}")


@local_app.command("status")
def local_status(port: Annotated[int, typer.Option(help="port on 127.0.0.1")] = 8080) -> None:
    """Tell whether the local llama-server is running and healthy (exit 1 if not).

    Example: prober local status
    """
    from prober.local import server as local

    info = local.status(port)
    if info is None:
        if (owner := local.foreign_server(port)) is not None:
            # Someone else's server: `prober run --target local` would probe it all the same.
            out.print(f"running, {escape(owner.describe())}")
            raise typer.Exit(0 if owner.healthy else 1)
        out.print(f"not running (port {port})")
        raise typer.Exit(1)
    state = "healthy" if local.healthy(port) else "not healthy"
    out.print(f"running, {state}: pid {info.pid}, {info.base_url}, log {escape(info.log)}")
    if state != "healthy":
        raise typer.Exit(1)


def main() -> None:
    """Entry point: user-facing errors become one line and an exit code, never a traceback."""
    try:
        # Standalone mode: typer shows its own usage errors (exit 2) and turns typer.Exit into the
        # exit code; everything else reaches the handlers below.
        app()
    except ProberError as exc:
        err.print(f"error: {_shown(exc)}", soft_wrap=True)   # one line, however long
        sys.exit(exc.exit_code)
    except Exception as exc:   # the store, the file system, or a bug: still one line (prober.commands.failures)
        from prober.commands.failures import describe

        line, code = describe(exc)
        err.print(f"error: {escape(line)}", soft_wrap=True)
        sys.exit(code)


if __name__ == "__main__":
    main()
