"""The report as one self-contained HTML file: inline SVG charts, inline CSS, no scripts, nothing
fetched. Jinja2 autoescapes every value, and stored text (model output, error messages, labels,
target names) is only ever inserted as a value; the charts are inserted as markup because
reports/svg.py escapes their text itself. A Content-Security-Policy forbids scripts and network
access as a second line of defence.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
from markupsafe import Markup

from prober.core.stats import FLAG_NOTES, PERCENTILE_INTERVAL_NOTE
from reports.collect import DETAIL_RUNS, FiringAlert, Report, run_page_name
from reports.plots import label_text
from reports.svg import fmt, interval_text, render

if TYPE_CHECKING:
    from reports.site import SiteIndex


def recent_text(values: Sequence[float | None]) -> str:
    """A metric's values in its newest six complete runs, oldest first: one filter call per table
    row, not a Jinja map and join (a year's site has tens of thousands of rows)."""
    return " → ".join(fmt(value) for value in values[-6:])


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
_ENV.filters["recent"] = recent_text
_ENV.filters["interval"] = lambda m: interval_text(m.ci_low, m.ci_high, m.flags)
_ENV.globals["flag_notes"] = FLAG_NOTES
_ENV.globals["percentile_note"] = PERCENTILE_INTERVAL_NOTE
_ENV.globals["detail_runs"] = DETAIL_RUNS
_ENV.filters["page"] = run_page_name
_ENV.filters["utc"] = lambda when: "-" if when is None else when.strftime("%Y-%m-%d %H:%M UTC")


def render_html(report: Report, root: str = "") -> str:
    """A report page; `root` leads from where the page is written to the site's top directory
    (reports/site.py), whose index.html, latest.html and runs/ the page links to."""
    return _ENV.get_template("report.html.j2").render(report=report, firing=report.firing, root=root)


def render_index(index: SiteIndex, firing: Sequence[FiringAlert]) -> str:
    return _ENV.get_template("index.html.j2").render(index=index, firing=firing, root="")
