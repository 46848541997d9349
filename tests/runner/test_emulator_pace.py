"""An emulator target keeps the scenario's timing for probes whose metrics measure it and runs a
probe whose metrics do not depend on timing fast (100x pace, 8 tokens a chunk), with the same
answers and the same usage. (Divergence, which depends on overlap only, is held to its effect in
tests/suites/test_example_scenarios.py.)"""

from __future__ import annotations

import json
import math

import pytest

from prober.core.config import ProberConfig
from prober.emulator.tokenizer import count_tokens
from prober.probes.latency import LatencyProbe
from prober.probes.schema_order import SchemaOrderProbe
from prober.run.runner import EMULATOR_PACE, Runner
from prober.store import Store

pytestmark = pytest.mark.emulator


def test_timed_probes_get_a_chunk_per_token_and_untimed_ones_get_fast_chunks(tmp_path) -> None:
    assert (LatencyProbe.timing, SchemaOrderProbe.timing) == ("measured", "none")
    _, tokens_per_chunk = EMULATOR_PACE["none"]
    (tmp_path / "mix.toml").write_text('include = ["latency", "schema_order"]\n')
    config = ProberConfig.model_validate({
        "targets": {"emu": {"protocol": "openai", "model": "emulator-1", "emulator": {}}},
        "store": {"url": f"sqlite:///{tmp_path}/p.db"}, "runner": {"progress": False},
        "suite_paths": [str(tmp_path)]})
    overrides = {"latency.levels": [1], "latency.requests_per_level": 4, "latency.warmup": 0,
                 "latency.max_tokens": 24, "schema_order.limit": 4}
    result = Runner(config).run("mix", None, overrides)
    assert result.status == "complete", result.problems
    with Store.open(config.store.url) as store:
        rows = store.samples(result.run_id)
    latency = [r for r in rows if r["probe"] == "latency"]
    schema = [r for r in rows if r["probe"] == "schema_order"]
    assert len(latency) == 4 and len(schema) == 8
    for row in latency:
        tokens = row["usage"]["completion_tokens"]
        assert len(row["chunk_chars"]) == tokens == 24
        # The scenario's 200 tokens/s puts 115 ms between the first and the last token (23 gaps of
        # 5 ms), 100x pace 1.15 ms: half the former tells them apart whatever a late first token took.
        offsets = row["chunk_offsets_ms"]
        assert offsets[-1] - offsets[0] >= 23 * 5 / 2
    for row in schema:
        tokens = row["usage"]["completion_tokens"]
        assert tokens == count_tokens(row["output_text"])             # usage counts tokens, not chunks
        assert len(row["chunk_chars"]) == math.ceil(tokens / tokens_per_chunk)
        json.loads(row["output_text"])
