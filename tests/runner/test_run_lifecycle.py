"""How a run ends: killed, interrupted, out of budget, endpoint unreachable, on PostgreSQL."""

import os
import signal
import subprocess
import sys
import time

import pytest

from prober.core.config import ProberConfig
from prober.run.runner import Runner
from prober.store import Store
from tests.support.cli import prober
from tests.support.emulated import emulator_process
from tests.support.llama import free_port

SLOW = "first_token_delay_ms = 5\ndecode_tokens_per_s = 100\noutput_tokens = 10\nslots = 4\n"


def _write_config(tmp_path, base_url, extra=""):
    path = tmp_path / "prober.toml"
    path.write_text(f'[store]\nurl = "sqlite:///{tmp_path}/p.db"\n[runner]\nprogress = false\n{extra}\n'
                    f'[targets.emu]\nprotocol = "openai"\nbase_url = "{base_url}"\nmodel = "emulator-1"\n')
    return path


def _start_run(tmp_path, config, *params):
    args = ["run", "--suite", "latency", "--target", "emu", "--config", str(config)]
    for p in params:
        args += ["--param", p]
    return subprocess.Popen([sys.executable, "-m", "prober", *args], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_samples(db_url, at_least, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        store = Store.open(db_url)
        try:
            runs = store.list_runs(limit=1)
            if runs and runs[0].get("sample_count", 0) >= at_least:
                return runs[0]["id"]
        finally:
            store.close()
        time.sleep(0.2)
    raise AssertionError("the run stored no samples in time")


@pytest.mark.emulator
def test_sigkill_keeps_completed_samples_and_next_start_marks_interrupted(tmp_path):
    with emulator_process(tmp_path, SLOW) as base_url:
        config = _write_config(tmp_path, base_url)
        process = _start_run(tmp_path, config, "levels=[1]", "requests_per_level=500", "warmup=0")
        db = f"sqlite:///{tmp_path}/p.db"
        run_id = _wait_for_samples(db, 10)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        time.sleep(0.1)
        store = Store.open(db)
        try:
            kept = len(store.samples(run_id))
            assert store.get_run(run_id)["status"] == "running"   # nobody has looked yet
        finally:
            store.close()
        assert kept >= 10
        listing = prober("runs", "--config", str(config), cwd=tmp_path)
        assert listing.returncode == 0, listing.stderr
        store = Store.open(db)
        try:
            assert store.get_run(run_id)["status"] == "interrupted"
            assert len(store.samples(run_id)) == kept
        finally:
            store.close()


@pytest.mark.emulator
def test_ctrl_c_stops_cleanly_and_marks_the_run_interrupted(tmp_path):
    with emulator_process(tmp_path, SLOW) as base_url:
        config = _write_config(tmp_path, base_url)
        process = _start_run(tmp_path, config, "levels=[2]", "requests_per_level=500", "warmup=0")
        db = f"sqlite:///{tmp_path}/p.db"
        run_id = _wait_for_samples(db, 5)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 3, stderr
    assert "Traceback" not in stderr
    store = Store.open(db)
    try:
        run = store.get_run(run_id)
        assert run["status"] == "interrupted"
        assert run["finished_at"] is not None
        assert len(store.samples(run_id)) >= 5
    finally:
        store.close()


@pytest.mark.emulator
def test_budget_stops_the_run_with_exit_3(tmp_path):
    with emulator_process(tmp_path, SLOW) as base_url:
        config = _write_config(tmp_path, base_url, "[runner.budget]\nmax_requests = 7\n")
        result = prober("run", "--suite", "latency", "--target", "emu", "--config", str(config),
                        "--param", "levels=[1, 2]", "--param", "requests_per_level=10", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert "budget exhausted" in result.stderr
    store = Store.open(f"sqlite:///{tmp_path}/p.db")
    try:
        (run,) = store.list_runs()
        assert run["status"] == "failed"
        assert len(store.samples(run["id"])) == 7
    finally:
        store.close()
    shown = prober("show", run["id"][:6], "--config", str(config), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "ttft_p50_ms" in shown.stdout and "concurrency=1" in shown.stdout
    missing = prober("show", "zzzz", "--config", str(config), cwd=tmp_path)
    assert missing.returncode == 2 and "no run with id 'zzzz'" in missing.stderr


@pytest.mark.emulator
def test_unreachable_endpoint_exits_3_with_a_clear_message(tmp_path):
    config = _write_config(tmp_path, f"http://127.0.0.1:{free_port()}")
    result = prober("run", "--suite", "latency", "--target", "emu", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 3
    assert "cannot connect" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.infra
def test_latency_suite_against_postgresql(tmp_path, postgres_url):
    with emulator_process(tmp_path, SLOW) as base_url:
        config = ProberConfig.model_validate({
            "store": {"url": postgres_url}, "runner": {"progress": False},
            "targets": {"emu": {"protocol": "anthropic", "base_url": base_url, "model": "emulator-1"}}})
        result = Runner(config).run("latency", ["emu"], {"levels": [1, 4], "requests_per_level": 8,
                                                         "warmup": 1})
    assert result.exit_code == 0, result.problems
    store = Store.open(postgres_url)
    try:
        run = store.get_run(result.run_id)
        assert run["status"] == "complete"
        rows = store.samples(result.run_id)
        assert len(rows) == 2 * (8 + 1)
        assert all(r["ttft_ms"] > 0 and r["usage"]["output_tokens"] > 0 for r in rows)
        names = {m["name"] for m in store.metrics(result.run_id)}
        assert {"ttft_p50_ms", "itl_p99_ms", "goodput", "knee_concurrency"} <= names
    finally:
        store.close()
