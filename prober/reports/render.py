"""`prober report`: collect from the store, render in the asked format, write one file."""

from __future__ import annotations

from pathlib import Path

from prober.reports.collect import Report
from prober.reports.html import render_html
from prober.reports.json_report import render_json
from prober.reports.markdown import render_markdown

RENDERERS = {"html": (render_html, "html"), "md": (render_markdown, "md"), "json": (render_json, "json")}


def write_report(report: Report, fmt: str, out_dir: Path) -> Path:
    """Write the report to OUT_DIR/prober-report-<UTC time>.<ext> and return the path."""
    render, extension = RENDERERS[fmt]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"prober-report-{report.generated_at.strftime('%Y%m%dT%H%M%SZ')}.{extension}"
    path.write_text(render(report), encoding="utf-8")
    return path.resolve()
