"""Request shapes and the TTFT split end to end against the emulator, held to its ground truth: the
drawn lengths are what the emulator received, its llama-server-style timings are what it planned,
and TTFT minus the reported prefill is the emulator's own queue wait plus the client's overhead."""

import asyncio
from collections import defaultdict

import pytest

from prober.core import stats
from tests.support.emulated import run_suite_on_emulator
from tests.support.timing import CLIENT_MEDIAN_RATIO, median_allowed, reference_lateness, timing_sensitive

pytestmark = pytest.mark.emulator

FIRST_TOKEN_MS = 30.0
PREFILL_MS_PER_TOKEN = 0.5
SLOTS = 2
LEVELS = [1, 6]
REQUESTS = 24
SCENARIO = (f"first_token_delay_ms = {FIRST_TOKEN_MS}\nprefill_ms_per_token = {PREFILL_MS_PER_TOKEN}\n"
            f"decode_tokens_per_s = 400\noutput_tokens = 64\nslots = {SLOTS}\nserver_timings = true\n")


@timing_sensitive      # the queue comparison carries the client's overhead, measured against a bare client
def test_shapes_reach_the_server_and_ttft_splits_into_its_queue_and_prefill(tmp_path):
    reference = {level: asyncio.run(reference_lateness(0.04, REQUESTS, concurrent=level)).client
                 for level in LEVELS}
    rows, metrics, truth = run_suite_on_emulator(tmp_path, SCENARIO, "openai", "latency", {
        "levels": LEVELS, "requests_per_level": REQUESTS, "warmup": 0, "shape_seed": 3,
        "input_shape": {"kind": "uniform", "low": 20, "high": 200},
        "output_shape": {"kind": "normal", "mean": 6, "std": 2, "min": 2, "max": 10}})
    overheads = set()
    queue_gap = defaultdict(list)
    true_queue = defaultdict(list)
    for row in rows:
        assert row["error_type"] is None
        record = truth[row["request_id"]]
        shape = row["extra"]["shape"]
        # The answer is as long as drawn; the prompt as long as drawn plus the fixed framing
        # (nonce and instruction), which the emulator's tokenizer counts the same every time.
        assert record["output_tokens"] == shape["output_tokens"]
        overheads.add(record["input_tokens"] - shape["input_tokens"])
        # The server's reported prefill is exactly what the scenario makes of this prompt.
        timings = row["extra"]["timings"]
        assert timings["prompt_ms"] == pytest.approx(FIRST_TOKEN_MS + PREFILL_MS_PER_TOKEN * record["input_tokens"])
        assert timings["prompt_n"] == record["input_tokens"]
        level = row["labels"]["concurrency"]
        queue_gap[level].append(row["ttft_ms"] - timings["prompt_ms"] - record["queue_wait_ms"])
        true_queue[level].append(record["queue_wait_ms"])
    assert len(overheads) == 1
    drawn = {row["extra"]["shape"]["input_tokens"] for row in rows}
    assert len(drawn) > 10 and min(drawn) >= 20 and max(drawn) <= 200

    by_name = {(m["name"], m["labels"].get("concurrency")): m for m in metrics}
    for level in LEVELS:
        gap = stats.median(queue_gap[level])
        assert 0 <= gap <= median_allowed(reference[level], CLIENT_MEDIAN_RATIO), (level, gap, reference[level])
        assert by_name[("prefill_p50_ms", level)]["n"] == REQUESTS
    # Alone, nothing waits; six requests on two slots queue, and the split puts it in the queue part.
    assert max(true_queue[1]) == 0
    queued = by_name[("ttft_queue_p50_ms", 6)]["value"]
    assert queued == pytest.approx(stats.median([q + g for q, g in zip(true_queue[6], queue_gap[6], strict=True)]))
    assert queued > 2 * FIRST_TOKEN_MS
    # Request i has the same drawn shape at every level: the prefill the server reports is the same.
    assert by_name[("prefill_p50_ms", 6)]["value"] == by_name[("prefill_p50_ms", 1)]["value"]
    assert by_name[("knee_concurrency", None)]["ci_low"] is not None
