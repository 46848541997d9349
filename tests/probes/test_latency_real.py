"""The latency suite against a real llama-server, started the way a user starts it."""

import json

import pytest

from prober.store import Store
from tests.support.cli import prober
from tests.support.llama import free_port

pytestmark = pytest.mark.real


def test_local_start_then_latency_suite(tmp_path):
    port = free_port()
    started = prober("local", "start", "--port", str(port), cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    try:
        status = prober("local", "status", "--port", str(port), cwd=tmp_path)
        assert status.returncode == 0 and "healthy" in status.stdout

        config = tmp_path / "prober.toml"
        config.write_text(f'[store]\nurl = "sqlite:///{tmp_path}/p.db"\n\n'
                          f'[targets.local]\nprotocol = "openai"\nbase_url = "http://127.0.0.1:{port}"\n'
                          f'model = "SmolLM2-135M-Instruct"\n')
        # Default slots: 4. Concurrency 8 (twice the slots) must queue.
        run = prober("run", "--suite", "latency", "--target", "local", "--config", str(config),
                     "--param", "levels=[1, 8]", "--param", "requests_per_level=16",
                     "--param", "max_tokens=32", "--param", "input_tokens=64", cwd=tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr

        store = Store.open(f"sqlite:///{tmp_path}/p.db")
        try:
            (summary,) = store.list_runs(limit=1)
            assert summary["status"] == "complete"
            rows = store.samples(summary["id"])
            metrics = {(m["name"], json.dumps(m["labels"], sort_keys=True)): m["value"]
                       for m in store.metrics(summary["id"])}
        finally:
            store.close()
        # 2 levels x (16 measured + 2 warm-up), every one stored, none failed.
        assert len(rows) == 36
        assert [r for r in rows if r["error_type"]] == []
        assert all(r["ttft_ms"] is not None and r["usage"] for r in rows)
        ttft_1 = metrics[("ttft_p50_ms", '{"concurrency": 1}')]
        ttft_8 = metrics[("ttft_p50_ms", '{"concurrency": 8}')]
        assert ttft_8 > 2 * ttft_1, (ttft_1, ttft_8)
        assert metrics[("knee_concurrency", "{}")] == 8
    finally:
        stopped = prober("local", "stop", "--port", str(port), cwd=tmp_path)
        assert stopped.returncode == 0
    assert prober("local", "status", "--port", str(port), cwd=tmp_path).returncode == 1


def test_an_open_loop_level_completes_and_stores_every_sample(tmp_path, llama_servers):
    from prober.core.config import ProberConfig
    from prober.run.runner import Runner

    server = llama_servers.get()
    config = ProberConfig.model_validate({
        "store": {"url": f"sqlite:///{tmp_path}/p.db"},
        "runner": {"progress": False},
        "targets": {"local": {"protocol": "openai", "base_url": server.base_url, "model": "SmolLM2-135M-Instruct"}},
    })
    result = Runner(config).run("latency", ["local"], {"arrival": "poisson", "rates": [4.0], "requests_per_level": 12,
                                                       "warmup": 1, "max_tokens": 16, "input_tokens": 32})
    assert result.exit_code == 0, result.problems
    store = Store.open(f"sqlite:///{tmp_path}/p.db")
    try:
        rows = store.samples(result.run_id)
        metrics = {m["name"]: m for m in store.metrics(result.run_id)
                   if m["labels"] == {"arrival": "poisson", "rate_rps": 4.0}}
    finally:
        store.close()
    # 12 measured and 1 warm-up request, each stored once with its place in the schedule.
    assert len(rows) == 13 and [r for r in rows if r["error_type"]] == []
    assert sorted(r["labels"]["phase"] for r in rows).count("measure") == 12
    assert all(r["ttft_ms"] is not None and r["usage"] for r in rows)
    assert all(r["extra"]["send_lag_ms"] >= 0 and "scheduled_offset_ms" in r["extra"] for r in rows)
    assert metrics["ttft_p50_ms"]["n"] == 12 and metrics["achieved_rate_rps"]["value"] > 0
