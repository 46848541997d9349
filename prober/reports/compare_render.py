"""A comparison (prober/reports/compare.py) as text, Markdown, JSON or one self-contained HTML page.

Everything a comparison holds came from the store and, before that, from endpoints: target names,
labels and reasons are escaped in every format (Markdown: reports.markdown.text; HTML: Jinja2's
autoescape, the charts escaped by prober/reports/svg.py).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from prober.core.controlchars import escape_controls
from prober.reports.compare import FDR, Compared, Comparison, Side
from prober.reports.markdown import text
from prober.reports.plots import label_text
from prober.reports.svg import fmt, render

# Marks a significant difference in the table and in Markdown; the legend says what it means.
SIGNIFICANT_MARKER = "*"


def change_text(c: Compared) -> str:
    """B against A: "+50%" for a relative change, "+0.12" in the metric's unit otherwise."""
    return "-" if c.difference is None else _signed(c.difference, c.relative)


def interval_text(c: Compared) -> str:
    if c.low is None or c.high is None:
        return ""
    return f"{_signed(c.low, c.relative)} .. {_signed(c.high, c.relative)}"


def _signed(value: float, relative: bool) -> str:
    if relative:
        return f"{value * 100:+.0f}%" if abs(value) >= 0.1 else f"{value * 100:+.1f}%"
    return ("+" if value > 0 else "") + fmt(value)


def p_text(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return "<1e-4" if value < 1e-4 else f"{value:.2g}"


def metric_text(c: Compared, with_probe: bool = True) -> str:
    """[target /] [probe] name (labels): one string for a table's first column (unescaped)."""
    labels = label_text(c.labels)
    where = f" ({labels})" if labels else ""
    return f"{c.target + ' / ' if c.target else ''}{c.probe + ' ' if with_probe else ''}{c.name}{where}"


def side_text(side: Side) -> str:
    """Which runs a side holds (unescaped)."""
    if not side.runs:
        return f"{side.name}: no runs"
    first, last = side.runs[-1]["started_at"], side.runs[0]["started_at"]
    sites = ", ".join(sorted({run["site"] for run in side.runs if run.get("site")}))
    site = f", site {sites}" if sites else ""
    if len(side.runs) == 1:
        run = side.runs[0]
        targets = [side.target] if side.target else run.get("targets") or []
        return (f"{side.name}: run {run['id']} ({run['suite']}, {_utc(first)}, {run['status']}), "
                f"target{'s' if len(targets) > 1 else ''} {', '.join(targets) or '-'}{site}")
    target = f", target {side.target}" if side.target else ""
    return f"{side.name}: {len(side.runs)} runs{target}{site}, {_utc(first)} .. {_utc(last)}"


def legend_lines(comparison: Comparison) -> list[str]:
    """What the columns mean, and what was left out (unescaped)."""
    lines = [f"change: B against A, in % where the metric changes by a factor (B / A - 1), else B - A; "
             f"{SIGNIFICANT_MARKER}: significant, Benjamini-Hochberg q <= {FDR:g} over the {len(comparison.compared)} "
             "metrics compared and at least [drift] min_effect (prober/reports/compare.py says which test each kind "
             "of metric gets); "
             "flagged: an interval too wide to judge on one side (too few requests)"]
    if comparison.only_a or comparison.only_b:
        lines.append(f"on one side only (not compared): A {', '.join(comparison.only_a) or '-'}; "
                     f"B {', '.join(comparison.only_b) or '-'}")
    return lines


def _utc(when: dt.datetime | None) -> str:
    return "-" if when is None else when.strftime("%Y-%m-%d %H:%M UTC")


# --- Markdown ----------------------------------------------------------------------------------

def render_markdown(comparison: Comparison) -> str:
    lines = ["# prober compare", "", f"- {text(side_text(comparison.a))}", f"- {text(side_text(comparison.b))}", "",
             "| metric | A | B | change | 95% CI | p | q | test |", "|---|---|---|---|---|---|---|---|"]
    for c in comparison.compared:
        mark = f" {text(SIGNIFICANT_MARKER)}" if c.significant else ""
        lines.append(f"| {text(metric_text(c))} | {fmt(c.a)} | {fmt(c.b)} | {change_text(c)}{mark} | "
                     f"{interval_text(c)} | {p_text(c.p_value)} | {p_text(c.q_value)} | {text(c.test or c.note)} |")
    if comparison.not_comparable:
        lines += ["", "## Not comparable", "", "| metric | why |", "|---|---|"]
        lines += [f"| {text(n.target + ' / ' if n.target else '')}{text(n.probe)} {text(n.name)} "
                  f"{text(label_text(n.labels))} | {text(n.reason)} |" for n in comparison.not_comparable]
    lines += [""] + [text(line) for line in legend_lines(comparison)] + [""]
    return "\n".join(lines)


# --- JSON --------------------------------------------------------------------------------------

def jsonable(value: Any) -> Any:
    """Plain JSON: datetimes in ISO 8601, NaN and infinities as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    return value


def render_json(comparison: Comparison) -> str:
    def side(s: Side) -> dict[str, Any]:
        return {"name": s.name, "target": s.target,
                "runs": [{key: run.get(key) for key in ("id", "suite", "started_at", "status")} for run in s.runs]}

    model = {"a": side(comparison.a), "b": side(comparison.b), "generated_at": comparison.generated_at,
             "fdr": FDR, "compared": [dataclasses.asdict(c) for c in comparison.compared],
             "not_comparable": [dataclasses.asdict(n) for n in comparison.not_comparable],
             "only_a": comparison.only_a, "only_b": comparison.only_b}
    return json.dumps(jsonable(model), indent=1, allow_nan=False, default=str)


# --- HTML --------------------------------------------------------------------------------------

def _visible(value: Any) -> Any:
    """Control characters in stored text written as escapes (a page may be read with `cat` too);
    markup built here (the charts) passes as it is."""
    return escape_controls(value) if isinstance(value, str) and not isinstance(value, Markup) else value


_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True,
    finalize=_visible,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["fmt"] = fmt
_ENV.filters["svg"] = lambda plot: Markup(render(plot))
_ENV.filters["labels"] = label_text
for _name, _filter in (("change", change_text), ("interval", interval_text), ("p", p_text),
                       ("metric", metric_text), ("side", side_text), ("utc", _utc)):
    _ENV.filters[_name] = _filter


def render_html(comparison: Comparison) -> str:
    return _ENV.get_template("compare.html.j2").render(comparison=comparison, legend=legend_lines(comparison),
                                                       marker=SIGNIFICANT_MARKER)


RENDERERS = {"markdown": render_markdown, "json": render_json, "html": render_html}
