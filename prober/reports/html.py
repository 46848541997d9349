"""The report as one self-contained HTML file: inline SVG charts, inline CSS, no scripts, nothing
fetched. Jinja2 autoescapes every value, and stored text (model output, error messages, labels,
target names) is only ever inserted as a value; the charts are inserted as markup because
prober/reports/svg.py escapes their text itself. A Content-Security-Policy forbids scripts and network
access as a second line of defence.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
from markupsafe import Markup, escape

from prober.core.stats import FLAG_NOTES, PERCENTILE_INTERVAL_NOTE
from prober.reports.collect import DETAIL_RUNS, FiringAlert, LatestMetric, Report, run_page_name, slug
from prober.reports.plots import label_text
from prober.reports.svg import fmt, interval_text, render
from prober.reports.verdict_table import VerdictRow

if TYPE_CHECKING:
    from prober.reports.site import SiteIndex


def recent_text(values: Sequence[float | None]) -> str:
    """A metric's values in its newest six complete runs, oldest first: one filter call per table
    row, not a Jinja map and join (a year's site has tens of thousands of rows)."""
    return " → ".join(fmt(value) for value in values[-6:])


def _text(value: object) -> Markup:
    return escape("" if value is None else value)


def metric_row(m: LatestMetric) -> Markup:
    """A row of a probe's "Latest metrics" table, every value escaped. Built here rather than in
    the template, with f-strings of escaped values rather than Markup.format: a fleet's report has
    some ten thousand rows, and Jinja's dozen filter calls per row, then Markup.format's Python
    formatter, were the larger part of the time spent drawing it."""
    marks = m.overhead is not None and m.overhead.marks(m.value)
    flagged = " flagged" if m.flags else ""
    value = str(_text(fmt(m.value)))      # (a str: Markup + str would escape the spans added below)
    if m.flags:
        value += f' <span title="{_text(", ".join(m.flags))}: never judged">(!)</span>'
    if m.overhead is not None:
        value += (f' <span class="note{" flagged" if marks else ""}" title="the client\'s own overhead on this '
                  f'host, calibration run {_text(m.overhead.run_id)}{"; more than 10% of the figure" if marks else ""}'
                  f'">(client overhead {_text(fmt(m.overhead.value_ms))} ms{" (client)" if marks else ""})</span>')
    slo = "".join(f'<span class="{state}">{_text(r.rule)}: {state}</span> '
                  for r in m.slo for state in ("broken" if r.broken else "held",))
    n = "" if m.n is None else _text(m.n)
    return Markup(f'<tr><td>{_text(m.name)}</td><td>{_text(label_text(m.labels))}</td><td class="num{flagged}">'
                  f'{value}</td>\n<td class="num">{_text(interval_text(m.ci_low, m.ci_high, m.flags))}</td>\n'
                  f'<td class="num">{n}</td><td>{_text(m.unit or "")}</td>\n<td>{slo}</td>\n'
                  f'<td>{_text(recent_text(m.recent))}</td></tr>')


_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["fmt"] = fmt
_ENV.filters["labels"] = label_text
_ENV.filters["svg"] = lambda plot: Markup(render(plot))
_ENV.filters["metric_row"] = metric_row
_ENV.filters["interval"] = lambda m: interval_text(m.ci_low, m.ci_high, m.flags)
_ENV.globals["flag_notes"] = FLAG_NOTES
_ENV.globals["percentile_note"] = PERCENTILE_INTERVAL_NOTE
_ENV.globals["detail_runs"] = DETAIL_RUNS
_ENV.filters["page"] = run_page_name
_ENV.filters["slug"] = slug
_ENV.filters["utc"] = lambda when: "-" if when is None else when.strftime("%Y-%m-%d %H:%M UTC")


def render_html(report: Report, root: str = "", page_key: str = "") -> str:
    """A report page; `root` leads from where the page is written to the site's top directory
    (prober/reports/site.py), whose index.html, latest.html and runs/ the page links to.
    `page_key`: what a run's page was drawn from, kept in the page (prober/reports/site.py)."""
    return "".join(html_pieces(report, root, page_key))


def html_pieces(report: Report, root: str = "", page_key: str = "") -> Iterator[str]:
    """render_html's page in pieces, for writing as they come: a fleet's latest page is some 14 MB,
    held once as its pieces and again as their join."""
    return _ENV.get_template("report.html.j2").generate(report=report, firing=report.firing, root=root,
                                                        verdicts=report.verdicts, page_key=page_key)


def render_now(firing: Sequence[FiringAlert], verdicts: Sequence[VerdictRow], root: str) -> str:
    """The part of a page about now (templates/now.html.j2): the verdict table and the banner."""
    return _ENV.get_template("now.html.j2").render(firing=firing, verdicts=verdicts, root=root)


def render_index(index: SiteIndex, firing: Sequence[FiringAlert], verdicts: Sequence[VerdictRow] = ()) -> str:
    return _ENV.get_template("index.html.j2").render(index=index, firing=firing, root="", verdicts=verdicts)
