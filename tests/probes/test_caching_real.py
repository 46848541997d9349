"""The caching suite against a real llama-server, through /v1/messages (protocol anthropic) and
/v1/chat/completions (protocol openai).

llama-server caches every prompt's longest common prefix per slot: repeat and volatile have
pass/fail expectations; lookback and fan-out are findings (no 20-block limit is expected, and with
its 4 default slots fan-out hits depend on slot placement), so the tests only check that they ran
and stored their measurements. Prefixes are kept short: the 135M model prefills about 400 tokens
a second on 2 cores.
"""

from __future__ import annotations

import json
import re

import pytest

from prober.core.config import ProberConfig
from prober.run.runner import Runner
from prober.store import Store
from tests.support.cli import prober

pytestmark = [pytest.mark.real, pytest.mark.timeout(900)]

# Output is not what this suite measures: two tokens keep decoding (slow when the 2 cores are shared)
# out of the way.
SMALL = {"prefix_tokens": 384, "max_tokens": 2}


def _run(tmp_path, server, protocol: str, params: dict):
    config = ProberConfig.model_validate({
        "store": {"url": f"sqlite:///{tmp_path}/prober.db"},
        "runner": {"progress": False},
        "targets": {"local": {"protocol": protocol, "base_url": server.base_url,
                              "model": "SmolLM2-135M-Instruct"}},
    })
    result = Runner(config).run("caching", ["local"], {**SMALL, **params})
    assert result.exit_code == 0, result.problems
    store = Store.open(f"sqlite:///{tmp_path}/prober.db")
    try:
        rows = store.samples(result.run_id)
        metrics = {(m["name"], json.dumps(m["labels"], sort_keys=True)): m for m in store.metrics(result.run_id)}
    finally:
        store.close()
    assert rows and [r for r in rows if r["error_type"]] == []
    return metrics, rows


def value(metrics, name: str, **labels):
    return metrics[(name, json.dumps(labels, sort_keys=True))]["value"]


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
def test_repeat_hits_and_a_timestamp_at_the_start_of_the_system_prompt_kills_the_cache(
        tmp_path, llama_servers, protocol):
    metrics, _ = _run(tmp_path, llama_servers.get(), protocol,
                      {"cases": ["repeat", "volatile"], "requests": 5, "volatile_positions": ["system_start"]})
    assert value(metrics, "hit_rate", case="repeat") >= 0.8
    assert value(metrics, "read_fraction", case="repeat") > 0.9
    assert value(metrics, "read_fraction", case="volatile", position="system_start") < 0.05
    assert value(metrics, "cache_read_reported", case="usage") == 1.0
    # /v1/messages has no cache_creation_input_tokens: writes are unknown, so the cost says "assumed".
    writes = "assumed"
    assert 0 < value(metrics, "cost_multiplier", case="repeat", ttl="5m", writes=writes) < 1
    assert value(metrics, "cache_write_reported", case="usage") == 0.0
    assert value(metrics, "usage_consistent", case="usage") == 1.0
    # A reported hit comes with a much lower TTFT than a cold request: no timing mismatch.
    assert value(metrics, "timing_mismatch", case="usage") == 0.0


def test_lookback_and_fanout_run_and_store_their_findings(tmp_path, llama_servers):
    # One n below the hosted API's 20-block lookback and one above it.
    blocks = [4, 22]
    metrics, rows = _run(tmp_path, llama_servers.get(), "anthropic",
                         {"cases": ["lookback", "fanout"], "prefix_tokens": 256, "lookback_blocks": blocks,
                          "fanout_requests": 8})
    assert len([r for r in rows if r["case"] == "lookback"]) == 2 * 2 * len(blocks)
    for n in blocks:
        for mode in ("end", "extra"):
            assert value(metrics, "read_tokens", case="lookback", n=n, breakpoints=mode) is not None
    assert ("lookback_limit", '{"case": "lookback"}') in metrics
    assert ("extra_breakpoints_recover", '{"case": "lookback"}') in metrics
    for pattern in ("simultaneous", "staggered"):
        assert metrics[("hit_rate", json.dumps({"case": "fanout", "pattern": pattern}))]["n"] == 8
    assert len([r for r in rows if r["case"] == "fanout"]) == 1 + 8 + 8   # pilot, two patterns


def test_cli_run_caching_against_local_and_show_prints_every_case(tmp_path, llama_servers):
    server = llama_servers.get()
    config = tmp_path / "prober.toml"
    config.write_text(f'[store]\nurl = "sqlite:///{tmp_path}/p.db"\n\n'
                      f'[targets.local]\nprotocol = "openai"\nbase_url = "{server.base_url}"\n'
                      f'model = "SmolLM2-135M-Instruct"\n')
    params = ["prefix_tokens=256", "requests=2", "max_tokens=2", "min_prefix_low=64", "min_prefix_high=512",
              "fanout_requests=4"]
    run = prober("run", "--suite", "caching", "--target", "local", "--config", str(config),
                 *(arg for p in params for arg in ("--param", p)), cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    run_id = re.search(r"run ([0-9a-f]{12})", run.stdout + run.stderr).group(1)
    shown = prober("show", run_id, "--config", str(config), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    for case in ("repeat", "volatile", "min_prefix", "fanout", "usage"):
        assert f"case={case}" in shown.stdout, case
    # The Anthropic-only cases are not errors on an OpenAI endpoint: they are reported as skipped.
    for case in ("lookback", "tiers"):
        assert re.search(rf"case={case}, reason=anthropic protocol only\s.*skipped", shown.stdout), case
    for name in ("hit_rate", "read_fraction", "cost_multiplier", "min_prefix_tokens", "timing_mismatch"):
        assert name in shown.stdout
