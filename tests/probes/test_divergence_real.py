"""The divergence suite against a real llama-server: a positive and a negative control.

With its default 4 slots sharing one unified KV cache, llama-server's output at temperature 0
depends on what else is in the batch, so identical requests part at concurrency 4 and not at 1.
Started with `-np 8` (one KV region per slot) it stays deterministic at 1 and at 8 in flight.
Both runs go through the real CLI, `prober run --suite divergence --target local`, with a config
whose `local` target points at the fixture's server.
"""

import json

import pytest

from tests.support.cli import run_suite_on_local

pytestmark = pytest.mark.real

# The two shipped prompts with the most near-ties for this model: at concurrency 4, 19 and 12
# distinct outputs of 24 here ("list" gave 4).
OPEN_ENDED = '["story", "explain"]'


def _run_suite(tmp_path, port, *params):
    # ~100 s on an idle 2-core machine; far longer when it is shared
    rows, metric_rows = run_suite_on_local(tmp_path, port, "divergence", *params, timeout=1800)
    metrics = {(m["name"], m["labels"].get("prompt"), m["labels"].get("concurrency"), m["labels"].get("field")): m
               for m in metric_rows}
    return rows, metrics


def _assert_counts(rows, *, prompts, levels, per_level):
    """Every level's requests, and before them the default 8 reference requests per prompt."""
    phases = [r["labels"]["phase"] for r in rows]
    assert phases.count("measure") == prompts * levels * per_level
    assert phases.count("reference") == prompts * 8
    assert phases[:prompts * 8] == ["reference"] * (prompts * 8)      # sent before the levels


def _unique(metrics, prompt, level):
    return metrics["unique_outputs", prompt, level, None]["value"]


def test_default_slots_diverge_at_concurrency_4_and_not_alone(tmp_path, llama_servers):
    server = llama_servers.get()
    rows, metrics = _run_suite(tmp_path, server.port, "levels=[1, 4]", "requests_per_level=24", "max_tokens=128",
                               f"prompts={OPEN_ENDED}")
    _assert_counts(rows, prompts=2, levels=2, per_level=24)
    body = rows[0]["request_body"]
    assert body["temperature"] == 0.0 and body["seed"] == 1234 and body["max_tokens"] == 128
    prompts = json.loads(OPEN_ENDED)
    alone = {p: _unique(metrics, p, 1) for p in prompts}
    loaded = {p: _unique(metrics, p, 4) for p in prompts}
    print(f"unique outputs of 24: concurrency 1 {alone}, concurrency 4 {loaded}")
    assert sum(loaded.values()) > sum(alone.values()), (alone, loaded)
    assert sum(metrics["divergence_rate", p, 4, None]["value"] for p in prompts) > \
        sum(metrics["divergence_rate", p, 1, None]["value"] for p in prompts)
    # The stream sends one token per chunk, so divergence positions come in tokens too.
    diverged = [p for p in prompts if metrics["divergence_rate", p, 4, None]["value"] > 0]
    assert diverged and all(("first_divergence_token_min", p, 4, None) in metrics for p in diverged)
    assert all(metrics["system_fingerprints", p, 4, None]["value"] >= 1 for p in prompts)


def test_one_kv_region_per_slot_does_not_diverge(tmp_path, llama_servers):
    server = llama_servers.get(slots=8)
    rows, metrics = _run_suite(tmp_path, server.port, "levels=[1, 8]", "requests_per_level=16", "max_tokens=128",
                               'prompts=["story", "explain", "review_json"]')
    _assert_counts(rows, prompts=3, levels=2, per_level=16)
    for prompt in ("story", "explain", "review_json"):
        for level in (1, 8):
            assert _unique(metrics, prompt, level) == 1, (prompt, level)
            assert metrics["divergence_rate", prompt, level, None]["value"] == 0
        assert metrics["divergence_trend_p_value", prompt, None, None]["value"] == 1.0
    # The structured prompt, answered under its schema: valid JSON, every field agreeing.
    assert metrics["json_valid_rate", "review_json", 8, None]["value"] == 1
    assert metrics["field_agreement", "review_json", 8, "sentiment"]["value"] == 1
