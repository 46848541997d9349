"""Dashboards: the Prometheus export's state series (alerts, SLOs, run status, age of the last
complete run) from a real store; every series the Grafana dashboard and the alert rules query is
one the export writes (names taken from an actual export, not a list); promtool checks the rules
and runs their unit tests."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from prober.reports.prometheus import exposition
from tests.support.cli import prober
from tests.support.report_store import EVIL_TARGET, NOW, write_cli_config

DEPLOY = Path(__file__).parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "prober.json"
RULES = DEPLOY / "prometheus" / "prober-rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "prober-rules.test.yml"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_SERIES = re.compile(r"\bprober_[a-zA-Z0-9_:]+")


def _samples(body: str) -> list[tuple[str, dict[str, str], float]]:
    samples = []
    for line in body.splitlines():
        if line and not line.startswith("#"):
            match = _SAMPLE.match(line)
            assert match, line
            labels = {key: re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)
                      for key, value in _LABEL.findall(match.group(2) or "")}
            samples.append((match.group(1), labels, float(match.group(3))))
    return samples


def _one(samples, name: str, **labels: str) -> float:
    [value] = [v for n, found, v in samples if n == name and all(found.get(k) == w for k, w in labels.items())]
    return value


def _series_named(expr: str) -> set[str]:
    """The prober series a PromQL expression reads (label values in quotes are not names)."""
    return set(_SERIES.findall(re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)))


@pytest.fixture(scope="module")
def timed_export(report_store):
    """The textfile a CLI export wrote, and the wall-clock window the export ran in."""
    tmp, config, _ = report_store
    write_cli_config(tmp, config)
    before = time.time()
    result = prober("export", "--format", "prometheus", "--out", str(tmp / "textfile"), cwd=tmp)
    assert result.returncode == 0, result.stderr
    return (tmp / "textfile" / "prober.prom").read_text(), (before, time.time())


@pytest.fixture(scope="module")
def export(timed_export):
    return timed_export[0]


@pytest.mark.emulator
def test_export_writes_alert_slo_run_status_and_age(timed_export):
    export, (export_began, export_ended) = timed_export
    samples = _samples(export)
    evil = {"target": EVIL_TARGET, "suite": "nightly"}
    # the alert firing now, and the SLO rule the last complete night broke
    assert _one(samples, "prober_alert_firing", alert="no-divergence", kind="slo", severity="critical", **evil) == 1
    assert _one(samples, "prober_slo_broken", slo="no-divergence", **evil) == 1
    held = [v for n, labels, v in samples if n == "prober_slo_broken" and labels.get("slo") == "ttft-generous"]
    assert held == [0.0, 0.0, 0.0]                  # one per concurrency level of the latency run
    # the newest night failed: its status is exported, its values are not (they stay the last complete run's)
    assert _one(samples, "prober_run_status", status="failed", **evil) == 1
    assert _one(samples, "prober_run_status", status="complete", **evil) == 0
    assert _one(samples, "prober_run_status", status="complete", target="emulator", suite="latency") == 1
    assert 0.9 not in [v for n, labels, v in samples if n == "prober_divergence_divergence_rate"
                       and labels["target"] == EVIL_TARGET]
    # the age of the last complete run, as of the export
    exported_at = _one(samples, "prober_export_timestamp_seconds")
    finished = _one(samples, "prober_last_run_timestamp_seconds", **evil)
    assert _one(samples, "prober_last_complete_run_age_seconds", **evil) == pytest.approx(exported_at - finished)
    # The store's nights were written when this test session began, minutes or (in a full run) many
    # minutes before the export: the export's clock is the export's own, the finish the stored one.
    assert export_began - 1 <= exported_at <= export_ended + 1
    night_began = (NOW - dt.timedelta(days=1)).timestamp()
    assert night_began < finished <= night_began + 600       # the complete night a day ago, 5 minutes long
    # a stored None (the no-penalty baseline's penalty value) is left out, never written "None"
    assert '="None"' not in export
    baseline = [labels for n, labels, _ in samples if n == "prober_penalty_corruption_rate"
                and labels.get("penalty") == "none"]
    assert baseline and all("penalty_value" not in labels for labels in baseline)


@pytest.mark.unit
def test_exposition_without_state_inputs_keeps_its_old_series_only():
    row = {"target": "t", "suite": "s", "run_id": "r", "run_status": "complete", "probe": "p", "name": "x",
           "unit": None, "labels": {"k": None, "j": 2}, "value": 1.0, "ci_low": None, "ci_high": None,
           "run_started_at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
           "run_finished_at": None}
    names = {name for name, _, _ in _samples(exposition([row]))}
    assert names == {"prober_p_x", "prober_last_run_timestamp_seconds", "prober_last_complete_run_age_seconds",
                     "prober_export_timestamp_seconds"}
    assert 'prober_p_x{j="2",suite="s",target="t"} 1.0' in exposition([row])


def _dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel query and template variable of the dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [(f"panel {p['title']!r}", t["expr"]) for p in dashboard["panels"] for t in p["targets"]]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            queries.append((f"variable {variable['name']}", variable["query"]["query"]))
    return queries


@pytest.mark.emulator
def test_every_dashboard_and_rule_query_names_an_exported_series(export):
    samples = _samples(export)
    exported = {name for name, _, _ in samples}
    queries = _dashboard_queries() + [("rule", expr.strip()) for expr in
                                      re.findall(r"^\s*expr:\s*(.+)$", RULES.read_text(), re.M)]
    assert len(queries) >= 15
    for where, expr in queries:
        named = _series_named(expr)
        assert named, (where, expr)
        assert named <= exported, (where, expr, named - exported)
    # the legend's labels are labels those series carry
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for query in panel["targets"]:
            wanted = set(re.findall(r"\{\{(\w+)\}\}", query.get("legendFormat", "")))
            for name in _series_named(query["expr"]):
                carried = set().union(*(labels for n, labels, _ in samples if n == name))
                assert wanted <= carried, (panel["title"], name, wanted - carried)
    # the dashboard shows what the issue asks for
    shown = set().union(*(_series_named(expr) for _, expr in _dashboard_queries()))
    for needed in ("prober_latency_ttft_p50_seconds", "prober_latency_ttft_p99_seconds",
                   "prober_latency_itl_p50_seconds", "prober_latency_itl_p99_seconds", "prober_caching_hit_rate",
                   "prober_divergence_divergence_rate", "prober_penalty_corruption_rate",
                   "prober_schema_order_accuracy", "prober_alert_firing", "prober_slo_broken", "prober_run_status"):
        assert needed in shown, needed


@pytest.mark.infra
def test_promtool_checks_the_export_and_the_rules(export):
    check = subprocess.run(["promtool", "check", "metrics"], input=export, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and check.stdout == "" and check.stderr == "", (check.stdout, check.stderr)
    rules = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert rules.returncode == 0 and "SUCCESS: 4 rules found" in rules.stdout, rules.stdout + rules.stderr
    tests = subprocess.run(["promtool", "test", "rules", str(RULE_TESTS)], capture_output=True, text=True,
                           timeout=120)
    assert tests.returncode == 0 and "SUCCESS" in tests.stdout, tests.stdout + tests.stderr
    # the unit tests can fail: a rule that no longer fires on its series is caught
    broken = RULE_TESTS.parent / ".broken-rules.yml"
    broken.write_text(RULES.read_text().replace("prober_alert_firing == 1", "prober_alert_firing == 2"))
    try:
        text = RULE_TESTS.read_text().replace("  - prober-rules.yml", f"  - {broken.name}")
        broken_tests = RULE_TESTS.parent / ".broken-rules.test.yml"
        broken_tests.write_text(text)
        failed = subprocess.run(["promtool", "test", "rules", str(broken_tests)], capture_output=True, text=True,
                                timeout=120)
        assert failed.returncode != 0 and "ProberAlertFiring" in failed.stdout + failed.stderr
    finally:
        broken.unlink(missing_ok=True)
        (RULE_TESTS.parent / ".broken-rules.test.yml").unlink(missing_ok=True)
