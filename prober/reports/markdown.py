"""The report as Markdown (for a wiki, a ticket or a terminal): tables instead of charts, each
metric with its values across the window. Stored text is escaped: in prose and tables Markdown
punctuation is backslash-escaped and `<`, `>`, `&` become entities, so that a renderer that allows
raw HTML shows it as text; sample outputs go in fenced code blocks longer than any fence inside them.
Control characters (an ESC in a server's fingerprint) are written as escapes everywhere, fenced
blocks included, so that `cat report.md` cannot drive the terminal.
"""

from __future__ import annotations

import datetime as dt
import re

from prober.core.controlchars import escape_controls
from prober.core.stats import FLAG_NOTES, PERCENTILE_INTERVAL_NOTE
from prober.reports.calibration import MARK_SHARE
from prober.reports.collect import LatestMetric, Report, Section
from prober.reports.plots import Plot, label_text
from prober.reports.svg import fmt, interval_text

# Next to a flagged value; the legend under the table says why it is never judged.
FLAG_MARKER = "(!)"
# Next to a latency figure the client's own overhead is too large a part of (prober/reports/calibration.py).
OVERHEAD_MARKER = "(client)"

# What can start emphasis, code, a link or a table cell; `<`, `>` and `&` become entities below.
_PUNCTUATION = re.compile(r"([\\`*_\[\]|])")


def text(value: object) -> str:
    """Stored text made safe for Markdown prose and table cells: one line, nothing live."""
    escaped = _PUNCTUATION.sub(r"\\\1", escape_controls(str(value), keep="\n\t"))
    escaped = escaped.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return " ".join(escaped.split())


def code_block(value: str) -> str:
    value = escape_controls(value, keep="\n\t")
    longest = max((len(run) for run in re.findall(r"`+", value)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{value}\n{fence}"


def _utc(when: dt.datetime | None) -> str:
    return "-" if when is None else when.strftime("%Y-%m-%d %H:%M UTC")


def _ci(m: LatestMetric) -> str:
    return interval_text(m.ci_low, m.ci_high, m.flags)


def _value(m: LatestMetric) -> str:
    shown = fmt(m.value) + (f" {FLAG_MARKER}" if m.flags else "")
    if m.overhead is not None:
        mark = f" {OVERHEAD_MARKER}" if m.overhead.marks(m.value) else ""
        shown += f" (client overhead {fmt(m.overhead.value_ms)} ms{mark})"
    return shown


def _legend(metrics: list[LatestMetric]) -> list[str]:
    flags = sorted({flag for m in metrics for flag in m.flags or []})
    calibrations = sorted({m.overhead.run_id for m in metrics if m.overhead is not None})
    overhead = [f"Client overhead: what `prober calibrate` measured on this host (run "
                f"{text(', '.join(calibrations))}); {OVERHEAD_MARKER}: more than {MARK_SHARE:.0%} of the figure."
                ] if calibrations else []
    return [f"{FLAG_MARKER} {text(flag)}: {text(FLAG_NOTES.get(flag, 'never judged'))}." for flag in flags] \
        + overhead + [f"{text(PERCENTILE_INTERVAL_NOTE)}.", ""]


def _slo_cell(m: LatestMetric) -> str:
    return ", ".join(f"{text(r.rule)}: {'**broken**' if r.broken else 'held'}" for r in m.slo)


def _x(value: float | str | dt.datetime) -> str:
    if isinstance(value, dt.datetime):
        return value.strftime("%m-%d %H:%M")
    return value if isinstance(value, str) else fmt(value)


def _plot_summary(plot: Plot) -> list[str]:
    """A chart as text: one line per series with its points."""
    lines = [f"*{text(plot.title)}* ({text(plot.x_label)} -> {text(plot.y_label)})", ""]
    for series in plot.series:
        points = ", ".join(f"{_x(p.x)}: {fmt(p.y)}"
                           + (f" [{fmt(p.low)} .. {fmt(p.high)}]" if p.low is not None else "")
                           for p in series.points)
        lines.append(f"- {text(series.label)}: {text(points)}")
    if plot.note:
        lines.append(f"- {text(plot.note)}")
    return lines + [""]


def _not_complete(section: Section) -> str:
    skipped = [run for run in section.runs if not run.complete]
    return "" if not skipped else (f", {len(skipped)} not complete and left out of the values: "
                                   + ", ".join(f"{text(run.id)} ({text(run.status)})" for run in skipped))


def _section(section: Section) -> list[str]:
    latest = section.latest_run
    site = f" (site {text(section.site)})" if section.site else ""
    lines = [f"## {text(section.target)} / {text(section.suite)}{site}", "",
             f"Latest run `{latest.id}` started {_utc(latest.started_at)}, status {latest.status}; "
             f"{len(section.runs)} run(s) in the window{_not_complete(section)}.", ""]
    if section.provenance:
        lines += ["What it measured:", "", *(f"- {text(line.strip())}" for line in section.provenance), ""]
    if section.parameters:
        at_default = sum(e.at_default for e in section.parameters)
        lines += [f"Parameters that differ from the probe's defaults ({at_default} more at their defaults):", "",
                  "| entry | parameter | value | probe's default |", "| --- | --- | --- | --- |"]
        lines += [f"| {text(entry.entry)} ({text(entry.probe)} v{text(str(entry.version))}) | {text(p.name)} | "
                  f"{text(p.value)} | {'-' if p.default is None else text(p.default)} |"
                  for entry in section.parameters for p in entry.changed]
        lines.append("")
    if section.baseline_resets:
        lines += [*(f"- {text(line)}" for line in section.baseline_resets), ""]
    if section.firing:
        lines += ["Alerts firing now:", ""]
        lines += [f"- **{text(a.name)}** ({text(a.kind)}, {text(a.severity)}) since "
                  f"{_utc(a.fired_at)}: {text(a.summary)}" for a in section.firing]
        lines.append("")
    results = section.slo_results
    if results:
        # r.condition is a comparator and a number from the config, not stored text
        broken = sum(1 for _, r in results if r.broken)
        lines += [f"SLOs: {len(results) - broken} held, {broken} broken.", "",
                  "| rule | metric | labels | value | healthy when | severity | state |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {text(r.rule)} | {text(m.name)} | {text(label_text(m.labels))} | {fmt(m.value)} | "
                  f"{r.condition} | {r.severity} | {'**broken**' if r.broken else 'held'} |"
                  for m, r in results]
        lines.append("")
    for probe in section.probes:
        lines += [f"### {text(probe.probe)}", ""]
        for plot in probe.plots:
            lines += _plot_summary(plot)
        lines += ["| metric | labels | value | 95% CI | n | unit | SLO | values of complete runs (oldest first) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {text(m.name)} | {text(label_text(m.labels))} | {_value(m)} | {_ci(m)} | "
                  f"{'' if m.n is None else m.n} | {text(m.unit or '')} | {_slo_cell(m)} | "
                  f"{' -> '.join(fmt(v) for v in m.recent[-6:])} |" for m in probe.metrics]
        lines.append("")
        lines += _legend(probe.metrics)
        for example in probe.examples:
            lines += [f"Sample output, {text(example.case)} ({text(example.labels)}): {text(example.why)}", "",
                      code_block(example.text), ""]
    return lines


def _verdict_table(report: Report) -> list[str]:
    """The answer first: one row per target and site, and the `prober samples` line behind it."""
    if not report.verdicts:
        return []
    lines = ["| target | site | state | since run | metric | value and change | requests |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in report.verdicts:
        since = f"{text(row.since_run)} ({_utc(row.since_at)})" if row.since_run else ""
        requests = f"`{text(row.samples_command)}`" if row.samples_command else ""
        lines.append(f"| {text(row.target)} | {text(row.site)} | **{text(row.state)}** | {since} | "
                     f"{text(row.metric)} | {text(row.change)} | {requests} |")
    return [*lines, ""]


def render_markdown(report: Report) -> str:
    window = f"since {_utc(report.since)}" if report.since else "at any time"
    lines = ["# prober report", "", *_verdict_table(report),
             f"Generated {_utc(report.generated_at)} from {text(report.store_url)}; runs started {window}"
             + (f", target {text(report.target)}" if report.target else "")
             + (f", batch {text(report.batch)} (every site and shard)" if report.batch else "") + ".", ""]
    if not report.sections:
        lines += ["No metrics in this window.", ""]
    for section in report.sections:
        lines += _section(section)
    return "\n".join(lines)
