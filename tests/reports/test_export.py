"""`prober export`: CSV and Parquet round-trip through pandas; the Prometheus textfile passes
`promtool check metrics` and holds the latest complete run of each target and suite."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import subprocess

import pandas as pd
import pytest

from prober.core.config import ProberConfig
from prober.core.records import Metric, Run
from prober.reports.prometheus import exposition, gauge_name, label_name, label_value
from prober.run.runner import Runner
from prober.store import Store
from tests.support.cli import prober

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
HOSTILE_LABELS = {"quote": 'say "hi"', "back\\slash": "a\\b", "new-line": "one\ntwo", "target": "not the target",
                  "__reserved": "x", "9lives": "cat"}


def _run(store: Store, run_id: str, suite: str, days_ago: float, status: str, metrics: list[Metric]) -> None:
    started = NOW - dt.timedelta(days=days_ago)
    store.create_run(Run(id=run_id, suite=suite, started_at=started, prober_version="test", config_hash="x",
                         host="h", pid=1, targets=["gw"]))
    store.write_metrics(metrics)
    if status != "running":
        store.finish_run(run_id, status, started + dt.timedelta(minutes=2))


@pytest.fixture(scope="module")
def export_store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    config = ProberConfig.model_validate({
        "targets": {"emulator": {"protocol": "openai", "model": "emulator-1", "emulator": {}}},
        "store": {"url": f"sqlite:///{tmp}/prober.db"}, "runner": {"progress": False}})
    result = Runner(config).run("latency", ["emulator"], {"levels": [1, 2], "requests_per_level": 4, "warmup": 1,
                                                          "max_tokens": 8})
    assert result.status == "complete", result.problems
    store = Store.open(config.store.url)

    def metric(run_id, name, value, labels=None, unit=None, ci=(None, None)):
        return Metric(run_id, "gw", "penalty", name, value, labels or {}, ci[0], ci[1], 10, unit)

    _run(store, "old", "penalty", 2, "complete", [metric("old", "corruption_rate", 0.9)])
    _run(store, "new", "penalty", 1, "complete", [
        metric("new", "corruption_rate", 0.25, HOSTILE_LABELS, "ratio", (0.1, 0.5)),
        metric("new", "stall_ms", 1500.0, {"penalty_value": 0.5}, "ms"),
        metric("new", "records_total", 12.0), metric("new", "records_count", 12.0),
        metric("new", "nothing_measured", None), metric("new", "not_a_number", math.nan)])
    _run(store, "broken", "penalty", 0.5, "failed", [metric("broken", "corruption_rate", 0.7)])
    _run(store, "ongoing", "penalty", 0.1, "running", [metric("ongoing", "corruption_rate", 0.8)])
    (tmp / "prober.toml").write_text(f'[store]\nurl = "sqlite:///{tmp}/prober.db"\n')
    yield tmp, store, result.run_id
    store.close()


def _as_text(value) -> str:
    """CSV has one empty cell for None and for the empty string."""
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


@pytest.mark.emulator
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_tables_round_trip_through_pandas(export_store, fmt):
    tmp, store, latency_run = export_store
    out = tmp / f"tables-{fmt}"
    result = prober("export", "--format", fmt, "--out", str(out), cwd=tmp)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str((out / f"samples.{fmt}").resolve()), str((out / f"metrics.{fmt}").resolve())]
    read = pd.read_csv if fmt == "csv" else pd.read_parquet
    samples, metrics = read(out / f"samples.{fmt}"), read(out / f"metrics.{fmt}")

    stored_samples = store.sample_history()
    assert len(samples) == len(stored_samples) > 0
    for row, stored in zip(samples.to_dict("records"), stored_samples):
        assert (row["id"], row["run_id"], row["suite"], row["probe"]) == (
            stored["id"], stored["run_id"], stored["suite"], stored["probe"])
        assert json.loads(row["labels"]) == stored["labels"]
        assert _as_text(row["output_text"]) == _as_text(stored["output_text"])
        assert row["ttft_ms"] == pytest.approx(stored["ttft_ms"])
        assert pd.Timestamp(row["started_at"]) == pd.Timestamp(stored["started_at"])
        assert json.loads(row["chunk_offsets_ms"]) == stored["chunk_offsets_ms"]

    stored_metrics = store.metric_history()
    assert len(metrics) == len(stored_metrics)
    for row, stored in zip(metrics.to_dict("records"), stored_metrics):
        for column in ("run_id", "name", "run_status"):
            assert row[column] == stored[column]
        assert json.loads(row["labels"]) == stored["labels"]
        if stored["value"] is None or math.isnan(stored["value"]):
            assert math.isnan(row["value"])
        else:
            assert row["value"] == pytest.approx(stored["value"])
    hostile = metrics[(metrics["run_id"] == "new") & (metrics["name"] == "corruption_rate")].iloc[0]
    assert json.loads(hostile["labels"]) == HOSTILE_LABELS

    one_run = prober("export", "--format", fmt, "--out", str(out / "one"), "--run", latency_run[:8], cwd=tmp)
    assert one_run.returncode == 0, one_run.stderr
    assert set(read(out / "one" / f"metrics.{fmt}")["run_id"]) == {latency_run}


@pytest.mark.infra
def test_prometheus_textfile_passes_promtool(export_store):
    tmp, _store, _latency_run = export_store
    out = tmp / "textfile"
    result = prober("export", "--format", "prometheus", "--out", str(out), cwd=tmp)
    assert result.returncode == 0, result.stderr
    path = out / "prober.prom"
    assert result.stdout.strip() == str(path.resolve())
    body = path.read_text()

    check = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and check.stdout == "" and check.stderr == "", (check.stdout, check.stderr)

    # the latest complete run of each target and suite: not the older one, nor a failed or running one
    rates = [line for line in body.splitlines() if line.startswith("prober_penalty_corruption_rate{")]
    assert len(rates) == 1 and rates[0].endswith(" 0.25")
    assert ('label_target="not the target"' in rates[0] and 'quote="say \\"hi\\""' in rates[0]
            and 'back_slash="a\\\\b"' in rates[0] and 'new_line="one\\ntwo"' in rates[0]
            and 'label_reserved="x"' in rates[0] and 'label_9lives="cat"' in rates[0])
    assert re.search(r'^prober_penalty_corruption_rate_ci_low\{.*\} 0\.1$', body, re.M)
    assert re.search(r'^prober_penalty_stall_seconds\{penalty_value="0.5",site="[^"]+",suite="penalty",'
                     r'target="gw"\} 1\.5$', body, re.M)
    assert "prober_penalty_records{" in body and "prober_penalty_records_number{" in body
    assert "nothing_measured" not in body and "not_a_number" not in body
    assert re.search(r'^prober_latency_ttft_p50_seconds\{concurrency="2",site="[^"]+",suite="latency",'
                     r'target="emulator"\} ', body, re.M)
    last_run = dict(re.findall(r'^prober_last_run_timestamp_seconds\{site="[^"]+",suite="(\w+)",target="\w+"\} (\S+)$',
                               body, re.M))
    assert set(last_run) == {"latency", "penalty"}
    assert float(last_run["penalty"]) == (NOW - dt.timedelta(days=1) + dt.timedelta(minutes=2)).timestamp()
    # the rules are real: promtool does reject what the renaming avoids
    raw = "# HELP x_ms a\n# TYPE x_ms gauge\nx_ms 1\n"
    assert subprocess.run(["promtool", "check", "metrics"], input=raw, capture_output=True, text=True).returncode != 0


@pytest.mark.unit
def test_prometheus_names():
    assert gauge_name("latency", "ttft_p50_ms", "ms") == ("prober_latency_ttft_p50_seconds", 0.001)
    assert gauge_name("caching", "waited_s", "s") == ("prober_caching_waited_seconds", 1.0)
    assert gauge_name("latency", "output_tps_total", "tokens/s")[0] == "prober_latency_output_tps"
    assert gauge_name("x", "odd-name.v2", None)[0] == "prober_x_odd_name_v2"
    assert gauge_name("schema_order", "discordant_b_only", None)[0] == "prober_schema_order_discordant_bx_only"
    assert label_name("suite") == "label_suite" and label_name("max-tokens") == "max_tokens"
    assert label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert exposition([]) == ""


@pytest.mark.emulator
def test_export_errors(export_store):
    tmp, _, _ = export_store
    bad = prober("export", "--format", "xlsx", cwd=tmp)
    assert bad.returncode == 2 and "--format 'xlsx'" in bad.stderr and "Traceback" not in bad.stderr
    missing = prober("export", "--format", "csv", "--run", "nosuchrun", "--out", str(tmp / "x"), cwd=tmp)
    assert missing.returncode == 2 and "no run with id 'nosuchrun'" in missing.stderr
