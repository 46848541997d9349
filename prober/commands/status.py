"""`prober status`: the verdict table every report opens with, in the terminal (80 columns) or as
JSON for a script, and an exit code for a shell prompt or a chat-ops bot: 0 when every target is
healthy at every site, 1 otherwise (one is broken, drifting, failed or has no data, or there is
no target at all)."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from prober.alerting.verdicts import ReportVerdicts
from prober.commands.store_access import require_known_target
from prober.commands.terminal import shown, text_column
from prober.core.config import ProberConfig
from prober.core.redact import redact_value
from prober.reports.collect import collect, load_window, parse_since
from prober.reports.verdict_table import VerdictRow
from prober.run.store_access import open_store


def verdicts_now(config: ProberConfig, err: Console, since: str, target: str | None) -> list[VerdictRow]:
    """The verdict rows of the report over `since`: the same rows `prober report` opens with."""
    # No drift config: the verdicts read the alert states drift left, and a status needs none of
    # the report's baseline-reset lines, which read the runs before each section's latest.
    verdicts = ReportVerdicts(config.slo)
    start = parse_since(since)
    store = open_store(config.store.url, err)
    try:
        require_known_target(store, config, target)
        window = load_window(store, start, target, latest_only=True)     # no trends: the latest runs' rows
        report = collect(store, verdicts, start, target, window=window, expected=list(config.targets),
                         examples=False)
    finally:
        store.close()
    return report.verdicts


def print_status(out: Console, rows: list[VerdictRow]) -> None:
    """The table (it wraps its words to the console, 80 columns when that is all there is), then the
    `prober samples` line of each row that is not healthy: where its requests are."""
    table = Table(text_column("target"), text_column("site"), text_column("state"), text_column("since run"),
                  text_column("why"), title="prober status")
    for row in rows:
        since = f"{row.since_run} ({row.since_at:%Y-%m-%d %H:%M})" if row.since_run and row.since_at else ""
        why = f"{row.metric}: {row.change}" if row.metric else row.change
        table.add_row(shown(row.target), shown(row.site), shown(row.state), shown(since), shown(why))
    out.print(table)
    for row in rows:
        if row.state != ReportVerdicts.HEALTHY and row.samples_command:
            out.print(shown(f"{row.target} {row.site}: {row.samples_command}".replace("  ", " ")), soft_wrap=True)
    if not rows:
        out.print("no targets: nothing configured and no run in the window")


def status_command(config: ProberConfig, out: Console, err: Console, since: str, target: str | None,
                   as_json: bool) -> int:
    """Print the verdicts; the exit code (0: every target healthy)."""
    rows = verdicts_now(config, err, since, target)
    if as_json:
        # JSON escapes control characters itself; secrets are masked as everywhere else
        out.print(json.dumps(redact_value([row.as_json() for row in rows]), indent=1), markup=False,
                  highlight=False, soft_wrap=True)
    else:
        print_status(out, rows)
    return 0 if rows and all(row.state == ReportVerdicts.HEALTHY for row in rows) else 1
