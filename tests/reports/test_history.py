"""`prober history` through the console script: one metric over time, oldest run first, selected
by target, suite (or probe) and labels."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from pathlib import Path

import pytest

from prober.core.records import Metric, Run
from prober.store import Store
from tests.support.cli import prober
from tests.support.postgres import create_database

NOW = dt.datetime.now(dt.UTC)


def _write_history(url: str) -> None:
    with Store.open(url) as store:
        # written newest first: the command must order by when the runs started, not by insertion
        for run_id, suite, days_ago, values in (("run-c", "nightly", 1, (150.0, 900.0)),
                                                ("run-a", "latency", 3, (100.0, 700.0)),
                                                ("run-b", "nightly", 2, (120.0, 800.0))):
            started = NOW - dt.timedelta(days=days_ago)
            store.create_run(Run(id=run_id, suite=suite, started_at=started, prober_version="t", config_hash="x",
                                 host="h", pid=1, targets=["api"]))
            store.write_metrics([
                Metric(run_id, "api", "latency", "ttft_p50_ms", values[0], {"concurrency": 1}, n=32, unit="ms"),
                Metric(run_id, "api", "latency", "ttft_p50_ms", values[1], {"concurrency": 16}, n=32, unit="ms"),
                Metric(run_id, "other", "latency", "ttft_p50_ms", 5.0, {"concurrency": 1}, n=32, unit="ms"),
            ])
            store.finish_run(run_id, "complete", started + dt.timedelta(minutes=3))


@pytest.fixture
def history_dir(tmp_path):
    url = f"sqlite:///{tmp_path}/prober.db"
    (tmp_path / "prober.toml").write_text(f'[store]\nurl = "{url}"\n')
    _write_history(url)
    return tmp_path


def _run_ids(stdout: str) -> list[str]:
    return re.findall(r"\brun-[abc]\b", stdout)


@pytest.mark.unit
def test_history_prints_oldest_first(history_dir):
    result = prober("history", "--metric", "ttft_p50_ms", "--target", "api", "--labels", "concurrency=16",
                    cwd=history_dir)
    assert result.returncode == 0, result.stderr
    assert _run_ids(result.stdout) == ["run-a", "run-b", "run-c"]
    values = re.findall(r"concurrency=16 +│ (\d+) ", result.stdout)
    assert values == ["700", "800", "900"]
    assert "concurrency=1 " not in result.stdout and "other" not in result.stdout


@pytest.mark.unit
def test_history_filters(history_dir):
    by_suite = prober("history", "--metric", "ttft_p50_ms", "--suite", "nightly", "-t", "api", "-l", "concurrency=1",
                      cwd=history_dir)
    assert by_suite.returncode == 0, by_suite.stderr
    assert _run_ids(by_suite.stdout) == ["run-b", "run-c"]
    # a suite name also selects its probe's metrics inside nightly runs
    by_probe = prober("history", "--metric", "ttft_p50_ms", "--suite", "latency", "--target", "other",
                      cwd=history_dir)
    assert _run_ids(by_probe.stdout) == ["run-a", "run-b", "run-c"]
    recent = prober("history", "--metric", "ttft_p50_ms", "--target", "api", "--since", "36h", cwd=history_dir)
    assert _run_ids(recent.stdout) == ["run-c", "run-c"]


@pytest.mark.unit
def test_history_errors(history_dir):
    unknown = prober("history", "--metric", "ttft_p50", cwd=history_dir)
    assert unknown.returncode == 2 and "no probe produces metric 'ttft_p50' (did you mean ttft_p50_ms" in unknown.stderr
    filtered = prober("history", "--metric", "ttft_p50_ms", "--labels", "concurrency=64", cwd=history_dir)
    assert filtered.returncode == 2 and "concurrency=64" in filtered.stderr
    bad = prober("history", "--metric", "ttft_p50_ms", "--labels", "concurrency", cwd=history_dir)
    assert bad.returncode == 2 and "expected KEY=VALUE" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.infra
def test_history_on_postgresql(tmp_path, postgres_url):
    url = create_database(postgres_url, f"history_{uuid.uuid4().hex[:12]}")
    _write_history(url)
    result = prober("history", "--metric", "ttft_p50_ms", "--db", url, "-t", "api", "-l", "concurrency=1",
                    "--since", "60h", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert _run_ids(result.stdout) == ["run-b", "run-c"]
    report = prober("report", "--db", url, "--format", "json", "--out", str(tmp_path), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    sections = json.loads(Path(report.stdout.strip()).read_text())["sections"]
    assert [(s["target"], s["suite"], len(s["runs"])) for s in sections] == [
        ("api", "latency", 1), ("api", "nightly", 2), ("other", "latency", 1), ("other", "nightly", 2)]
