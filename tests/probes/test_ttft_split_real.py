"""The TTFT split and request shapes against a real llama-server with one slot: the server's own
`timings` reach every sample, and under four requests in flight the part of TTFT before the
server's prefill (the wait for the slot) grows while the reported prefill does not."""

import pytest

from tests.support.cli import run_suite_on_local

pytestmark = [pytest.mark.real, pytest.mark.timeout(600)]


def test_llama_server_timings_split_ttft_into_queue_and_prefill(tmp_path, llama_servers):
    server = llama_servers.get(slots=1)
    rows, metrics = run_suite_on_local(
        tmp_path, server.port, "latency", "levels=[1, 4]", "requests_per_level=8", "warmup=1", "max_tokens=8",
        'input_shape={kind = "uniform", low = 20, high = 80}', "shape_seed=4")
    assert len(rows) == 2 * (8 + 1)
    for row in rows:
        timings, shape = row["extra"]["timings"], row["extra"]["shape"]
        assert 20 <= shape["input_tokens"] <= 80 and shape["output_tokens"] == 8
        assert timings["prompt_ms"] > 0
        assert timings["cache_n"] + timings["prompt_n"] == row["usage"]["prompt_tokens"]
        assert row["usage"]["completion_tokens"] <= 8
    value = {(m["name"], m["labels"].get("concurrency")): m["value"] for m in metrics}
    queue_1, queue_4 = value[("ttft_queue_p50_ms", 1)], value[("ttft_queue_p50_ms", 4)]
    prefill_1, prefill_4 = value[("prefill_p50_ms", 1)], value[("prefill_p50_ms", 4)]
    print(f"TTFT p50 split, 1 slot: c=1 queue {queue_1:.1f} ms + prefill {prefill_1:.1f} ms; "
          f"c=4 queue {queue_4:.1f} ms + prefill {prefill_4:.1f} ms")
    # Alone, almost all of TTFT is the prefill; with four requests on one slot, the wait dominates.
    assert queue_1 < prefill_1
    assert queue_4 > 3 * max(queue_1, 1.0) and queue_4 > prefill_4
