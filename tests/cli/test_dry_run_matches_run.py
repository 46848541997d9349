"""The dry run's plan against what a real run sends: the same requests, the same output-token
ceiling, and input tokens as the emulator counted them on the wire (plus, where a request carries a
JSON schema, the schema: hosted APIs bill it as prompt, the emulator does not count it). Where a
probe adapts to the answers (the caching probe's minimum-prefix search), the plan is an upper
bound: never fewer requests or tokens than the run sent."""

from __future__ import annotations

import pytest

from prober.commands.dry_run import plan_run
from prober.core.config import ProberConfig
from prober.run.runner import Runner
from prober.store import Store

pytestmark = pytest.mark.emulator

OVERRIDES = {
    "latency.levels": [1, 2], "latency.requests_per_level": 3, "latency.warmup": 1, "latency.max_tokens": 8,
    "divergence.levels": [1, 4], "divergence.requests_per_level": 4, "divergence.reference_requests": 2,
    "divergence.max_tokens": 48,
    "penalty.modes": ["json_object", "json_schema"], "penalty.n_records": [3], "penalty.temperatures": [0.0],
    "penalty.repeats": 1, "penalty.baseline_repeats": 2,
    "schema_order.limit": 6,
    "caching.requests": 3, "caching.max_tokens": 4, "caching.prefix_tokens": 256,
    "caching.volatile_positions": ["system_start"], "caching.fanout_requests": 2,
    "caching.min_prefix_low": 128, "caching.min_prefix_high": 1024, "caching.min_prefix_resolution": 128,
}
# Probes whose requests do not depend on the answers: the plan is exact.
EXACT = {"latency", "divergence", "penalty", "schema_order"}


def test_a_dry_run_plans_what_the_run_then_sends(tmp_path) -> None:
    suite_dir = tmp_path / "suites"
    suite_dir.mkdir()
    (suite_dir / "mix.toml").write_text('include = ["latency", "divergence", "penalty", "schema_order", "caching"]\n')
    config = ProberConfig.model_validate({
        "targets": {"emu": {"protocol": "openai", "model": "emulator-1", "emulator": {}}},
        "store": {"url": f"sqlite:///{tmp_path}/p.db"}, "runner": {"progress": False},
        "suite_paths": [str(suite_dir)]})
    _, planned = plan_run(config, "mix", None, dict(OVERRIDES))
    result = Runner(config).run("mix", None, dict(OVERRIDES))
    assert result.status == "complete", result.problems
    with Store.open(config.store.url) as store:
        rows = [r for r in store.samples(result.run_id) if r.get("final", True)]
    assert {p.entry for p in planned} == {r["entry"] for r in rows}
    for plan in planned:
        sent = [r for r in rows if r["entry"] == plan.entry]
        output_tokens = sum(r["request_body"]["max_tokens"] for r in sent)
        if plan.probe in EXACT:
            assert (plan.requests, plan.output_tokens_max) == (len(sent), output_tokens), plan.entry
        else:
            assert plan.requests >= len(sent), plan.entry
            assert plan.output_tokens_max >= output_tokens, plan.entry
        counted = sum(r["usage"]["prompt_tokens"] for r in sent)
        if plan.probe == "latency":     # no schema: the same word-or-mark count, message for message
            assert plan.input_tokens == counted
        else:
            assert plan.input_tokens >= counted, plan.entry
