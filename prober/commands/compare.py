"""`prober compare`: pick the two sides (two runs, two targets in a window, two sites of one target
in a window, or two windows of one target), compare them (prober/reports/compare.py) and print or write
the result.

Which runs a window takes is the drift baseline's rule: runs of one site in which the target
completed (a window holding runs from several sites asks for --site).
Whether a metric measured the same thing on both sides is the drift baseline's rule too
(prober.alerting.baseline.what_changed), handed to the reports layer, which imports no alerting.
"""

from __future__ import annotations

import datetime as dt
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Column, Table

from prober.alerting.baseline import what_changed
from prober.alerting.drift import min_effect_for
from prober.commands.store_access import require_run
from prober.core.config import ProberConfig
from prober.core.errors import ConfigError
from prober.core.probe_registry import all_metric_names, did_you_mean
from prober.core.records import completed_targets, utcnow
from prober.reports.collect import parse_since
from prober.reports.compare import Comparison, Side, compare
from prober.reports.compare_render import (
    RENDERERS,
    SIGNIFICANT_MARKER,
    change_text,
    interval_text,
    legend_lines,
    metric_text,
    p_text,
    side_text,
)
from prober.reports.plots import label_text
from prober.reports.svg import fmt
from prober.run.store_access import open_store
from prober.store import Store
from prober.store.engine import redacted

FORMATS = ("table", *RENDERERS)
# The terminal table fits a classic terminal whatever the width rich detects.
TABLE_WIDTH = 80
# Runs a window may hold: a year of nightly runs and then some.
WINDOW_RUNS = 1000

USAGE = ("compare two runs (prober compare RUN_A RUN_B), two targets (--target A --target B [--since 7d] "
         "[--site S]), two sites of one target (--target T --site A --site B [--since 7d]) "
         "or two windows of one target (--target T --since 14d --until 7d [--site S]: before 7d ago against since)")


def compare_command(cfg: ProberConfig, out: Console, err: Console, shown: Callable[[Any], str], runs: list[str],
                    targets: list[str], since: str | None, until: str | None, suite: str | None, fmt_name: str,
                    out_path: Path | None, metrics: list[str], sites: list[str] | None = None) -> Comparison:
    """Build both sides, compare (every metric, or those named in `metrics`), and print the table
    or write the asked format (to `out_path`, or standard output)."""
    if fmt_name not in FORMATS:
        raise ConfigError(f"--format {fmt_name!r}: expected one of {', '.join(FORMATS)}")
    known = all_metric_names()
    for name in metrics:
        if known is not None and name not in known:
            raise ConfigError(f"--metric {name!r}: no probe produces it{did_you_mean(name, known)}")
    store = open_store(cfg.store.url, err, create=False)
    try:
        side_a, side_b = _sides(store, runs, targets, since, until, suite, sites or [])
        comparison = compare(store, side_a, side_b, what_changed,
                             lambda kind, metric: min_effect_for(kind, metric, cfg.drift), set(metrics) or None)
    finally:
        store.close()
    for side in (side_a, side_b):
        for run in side.runs if len(side.runs) == 1 else []:
            if run["status"] != "complete":
                err.print(f"note: run {shown(run['id'])} is {shown(run['status'])}: its metrics may be partial")
    if fmt_name == "table":
        _print_table(out, shown, comparison)
    else:
        rendered = RENDERERS[fmt_name](comparison)
        if out_path is None:
            out.file.write(rendered if rendered.endswith("\n") else rendered + "\n")
        else:
            out_path.parent.mkdir(parents=True, exist_ok=True)
            out_path.write_text(rendered, encoding="utf-8")
            err.print(f"{len(comparison.significant)} of {len(comparison.compared)} metrics differ significantly")
            out.print(shown(out_path.resolve()), soft_wrap=True)
    return comparison


def _sides(store: Store, runs: list[str], targets: list[str], since: str | None, until: str | None,
           suite: str | None, sites: list[str]) -> tuple[Side, Side]:
    if runs:
        if len(runs) != 2 or len(targets) > 1 or until or sites:
            raise ConfigError(f"prober compare: {USAGE}")
        target = targets[0] if targets else None
        return _run_side(store, "A", runs[0], target), _run_side(store, "B", runs[1], target)
    now = utcnow()
    if len(sites) > 2 or (len(sites) == 2 and (len(targets) != 1 or until)):
        raise ConfigError(f"prober compare: {USAGE}")
    site = sites[0] if len(sites) == 1 else None
    if len(targets) == 1 and len(sites) == 2:
        start = parse_since(since or "7d")
        return (_window_side(store, "A", targets[0], start, now, suite, sites[0]),
                _window_side(store, "B", targets[0], start, now, suite, sites[1]))
    if len(targets) == 2 and not until:
        start = parse_since(since or "7d")
        return (_window_side(store, "A", targets[0], start, now, suite, site),
                _window_side(store, "B", targets[1], start, now, suite, site))
    if len(targets) == 1 and until:
        start, end = parse_since(since), parse_since(until)
        if start is None:
            raise ConfigError(f"prober compare: --until needs --since (the start of side A); {USAGE}")
        if end is None or start >= end:
            raise ConfigError(f"prober compare: --since must be before --until; {USAGE}")
        return (_window_side(store, "A", targets[0], start, end, suite, site),
                _window_side(store, "B", targets[0], end, now, suite, site))
    raise ConfigError(f"prober compare: {USAGE}")


def _run_side(store: Store, name: str, run_id: str, target: str | None) -> Side:
    return Side(name, [require_run(store, run_id, target)], target)


def _window_side(store: Store, name: str, target: str, start: dt.datetime | None, end: dt.datetime,
                 suite: str | None, site: str | None) -> Side:
    # The store keeps to the window's start: the runs before it are never read. No `target` filter
    # there: completed_targets needs the target's own status, and list_runs' target filter would
    # also look for the target's samples in every run of the window.
    runs = [run for run in store.list_runs(limit=WINDOW_RUNS, suite=suite, site=site, since=start, counts=False)
            if run["started_at"] < end
            and target in completed_targets(run)]
    if not runs:
        when = (f"between {start:%Y-%m-%d %H:%M} and {end:%Y-%m-%d %H:%M} UTC" if start
                else f"before {end:%Y-%m-%d %H:%M} UTC")
        where = f" from site {site!r}" if site else ""
        raise ConfigError(f"side {name}: no run{f' of suite {suite}' if suite else ''} in which target {target!r} "
                          f"completed{where} {when} in {redacted(store.url)}")
    sites = sorted({run.get("site") or "" for run in runs})
    if len(sites) > 1:   # a window pooled over sites would mix their latencies
        raise ConfigError(f"side {name}: target {target!r} has runs from sites {', '.join(sites)} in this window; "
                          "choose one with --site")
    return Side(name, runs, target)


def _print_table(out: Console, shown: Callable[[Any], str], comparison: Comparison) -> None:
    width = min(TABLE_WIDTH, out.width)

    def lines(text: str, indent: str = "") -> None:
        # Escaped first (an escape is longer than its character), then wrapped: rich's markup
        # escapes only make the printed line shorter.
        for line in textwrap.wrap(shown(text), width, subsequent_indent=indent + "  ", initial_indent=indent):
            out.print(line, soft_wrap=True)

    for side in (comparison.a, comparison.b):
        lines(side_text(side))
    table = Table(Column("metric", overflow="fold", ratio=1), Column("A", justify="right"),
                  Column("B", justify="right"), Column("change", justify="right", no_wrap=True),
                  Column("95% CI", justify="right"), Column("q", justify="right", no_wrap=True),
                  box=box.SIMPLE_HEAD, width=width, pad_edge=False)
    with_probe = len({c.probe for c in comparison.compared}) > 1
    if not with_probe and comparison.compared:
        table.title = shown(comparison.compared[0].probe)
    for c in comparison.compared:
        mark = f" {SIGNIFICANT_MARKER}" if c.significant else ""
        table.add_row(shown(metric_text(c, with_probe)), fmt(c.a), fmt(c.b), change_text(c) + mark,
                      interval_text(c) or shown(c.note), p_text(c.q_value))
    out.print(table)
    if comparison.not_comparable:
        out.print("not comparable (a different measurement on one side):")
        for n in comparison.not_comparable:
            where = f"{n.target} / " if n.target else ""
            lines(f"{where}{n.probe} {n.name} {label_text(n.labels)}: {n.reason}", indent="  ")
    for line in legend_lines(comparison):
        lines(line)
