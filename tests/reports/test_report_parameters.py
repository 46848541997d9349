"""The report folds each section's probe parameters into a table of those that differ from the
probe's defaults (issue 31 item 4), in HTML and Markdown; `prober show` keeps the full list."""

from __future__ import annotations

import json
import re

import pytest

from prober.alerting.verdicts import ReportVerdicts
from prober.core.probe_registry import probe_class
from prober.reports.collect import collect
from prober.reports.html import render_html
from prober.reports.markdown import render_markdown
from prober.reports.parameters import entry_parameters


@pytest.mark.unit
def test_only_parameters_that_differ_from_the_probes_defaults_are_rows():
    defaults = probe_class("latency").Params().model_dump(mode="json")    # type: ignore[union-attr]
    params = {**defaults, "requests_per_level": 40, "levels": [1, 8], "warmup": defaults["warmup"]}
    entries = [{"target": "t", "entry": "latency.latency", "probe": "latency", "probe_version": 1, "params": params},
               {"target": "other", "entry": "latency.latency", "probe": "latency", "probe_version": 1,
                "params": {"requests_per_level": 7}},
               {"target": "t", "entry": "gone.gone", "probe": "not-installed", "probe_version": 3,
                "params": {"x": 1}}]
    latency, gone = entry_parameters(entries, "t")
    assert [(p.name, p.value, p.default) for p in latency.changed] == [
        ("levels", "[1, 8]", json.dumps(defaults["levels"])), ("requests_per_level", "40", "400")]
    assert latency.at_default == len(defaults) - 2
    # a probe that is not installed has no known defaults: every parameter is shown
    assert [(p.name, p.default) for p in gone.changed] == [("x", None)] and gone.at_default == 0


@pytest.mark.emulator
def test_the_report_shows_a_parameter_table_not_a_paragraph(report_store):
    _, config, store = report_store
    report = collect(store, ReportVerdicts(config.slo))
    html, markdown = render_html(report), render_markdown(report)
    section = next(s for s in report.sections if s.suite == "latency")
    [entry] = section.parameters
    assert entry.changed and entry.at_default > 0
    defaults = probe_class(entry.probe).Params().model_dump(mode="json")   # type: ignore[union-attr]
    assert all(json.loads(p.value) != defaults[p.name] for p in entry.changed)
    # the provenance lines no longer carry the parameters as one long line
    assert not any("params " in line for s in report.sections for line in s.provenance)
    anchor = html.split(f'<section id="{section.anchor}">', 1)[1].split("</details>", 1)[0]
    assert '<details class="provenance">' in anchor and '<table class="params">' in anchor
    rows = re.findall(r"<tr><td>latency\.latency \(latency v\d+\)</td><td>(\w+)</td>", anchor)
    assert rows == [p.name for p in entry.changed]
    assert f"Parameters that differ from the probe's defaults ({entry.at_default} more at their defaults" in anchor
    assert "| entry | parameter | value | probe's default |" in markdown
