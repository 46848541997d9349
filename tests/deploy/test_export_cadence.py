"""`prober export --format prometheus` and the deploy/ staleness rule (issue 32, item 2): each
(target, suite) carries its own cadence, a one-off pair none, so that `ProberNoRecentCompleteRun`
pages a nightly pair after 36 hours and never a `calibrate` run made once; and an export without
SLO rules says so on stderr."""

from __future__ import annotations

import datetime as dt
import subprocess
import textwrap
from pathlib import Path

import pytest

from prober.core.config import ProberConfig
from prober.reports.prometheus import expected_intervals, exposition
from prober.run.runner import Runner
from tests.support.cli import prober

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "prober-rules.yml"
T0 = dt.datetime(2026, 11, 1, 3, 15, tzinfo=dt.UTC)


def _run(suite: str, started: dt.datetime, status: str = "complete", target: str = "gw") -> dict:
    return {"id": f"{suite}-{started:%j%H}", "suite": suite, "status": status, "started_at": started,
            "site": "", "targets": [target], "target_status": {target: {"status": status, "reason": None}}}


@pytest.mark.unit
def test_a_pair_cadence_is_the_median_gap_of_its_complete_runs_and_a_one_off_has_none():
    nightly = [_run("nightly", T0 + dt.timedelta(days=day, minutes=3 * day)) for day in range(6)]
    late = [_run("nightly", T0 + dt.timedelta(days=6, hours=9))]                   # one late night
    failed = [_run("latency", T0 + dt.timedelta(days=day), "failed") for day in range(5)]
    once = [_run("calibrate", T0), _run("calibrate", T0 + dt.timedelta(hours=2))]   # two runs: still a one-off
    cadence = expected_intervals(nightly + late + failed + once)
    assert cadence == {("gw", "nightly", ""): 86400 + 180}      # the late night does not move the median
    text = exposition([], runs=nightly + once)
    assert 'prober_expected_interval_seconds{suite="nightly",target="gw"} 86580' in text
    assert 'suite="calibrate"' in text and "prober_expected_interval_seconds{suite=\"calibrate\"" not in text


@pytest.mark.unit
def test_the_staleness_rule_uses_the_expected_interval():
    rule = RULES.read_text()
    assert "prober_expected_interval_seconds" in rule.split("alert: ProberNoRecentCompleteRun")[1]
    checked = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.emulator
def test_an_export_without_slo_rules_says_it_exported_no_slo_series(tmp_path):
    config = ProberConfig.model_validate({"targets": {"emu": {"protocol": "openai", "model": "emulator-1",
                                                              "emulator": {}}},
                                          "store": {"url": f"sqlite:///{tmp_path}/prober.db"},
                                          "runner": {"progress": False}})
    assert Runner(config).run("latency", ["emu"], {"levels": [1], "requests_per_level": 12,
                                                   "warmup": 0}).status == "complete"
    db = f"sqlite:///{tmp_path}/prober.db"
    bare = prober("export", "--format", "prometheus", "--db", db, "--out", "bare", cwd=tmp_path)
    assert bare.returncode == 0, bare.stderr
    assert "exported no SLO series (prober_slo_broken): no --config given and no ./prober.toml" in bare.stderr
    assert "prober_slo_broken" not in (tmp_path / "bare" / "prober.prom").read_text()
    # With ./prober.toml present, its rules are read without --config.
    (tmp_path / "prober.toml").write_text(textwrap.dedent(f"""
        [store]
        url = "{db}"
        [[slo]]
        name = "ttft"
        metric = "ttft_p50_ms"
        comparator = "<="
        threshold = 100000
    """))
    ruled = prober("export", "--format", "prometheus", "--out", "ruled", cwd=tmp_path)
    assert ruled.returncode == 0, ruled.stderr
    assert "no SLO series" not in ruled.stderr
    assert 'prober_slo_broken{' in (tmp_path / "ruled" / "prober.prom").read_text()
    # ... each of them the rule's verdict on the run: held (0), the threshold being out of reach.
    verdicts = [line.rsplit(" ", 1) for line in (tmp_path / "ruled" / "prober.prom").read_text().splitlines()
                if line.startswith("prober_slo_broken{")]
    assert all('slo="ttft"' in series and float(value) == 0 for series, value in verdicts), verdicts
