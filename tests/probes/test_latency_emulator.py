"""The latency suite end to end against the emulator, checked against the emulator's ground truth."""

import asyncio
from collections import defaultdict

import pytest

from prober.core import stats
from prober.core.config import ProberConfig
from prober.run.runner import Runner
from prober.store import Store
from tests.support.emulated import emulator_process, ground_truth
from tests.support.timing import CLIENT_MEDIAN_RATIO, median_allowed, reference_lateness, timing_sensitive

pytestmark = pytest.mark.emulator

SLOTS = 8
LEVELS = [1, 2, 4, 8, 16, 32, 64]
REQUESTS = 32   # per level: a median TTFT per level, and a knee whose bootstrap interval excludes SLOTS


def _config(tmp_path, base_url, protocol="anthropic", **target):
    return ProberConfig.model_validate({
        "store": {"url": f"sqlite:///{tmp_path}/prober.db"},
        "runner": {"progress": False, "backoff_base": 0.05, "backoff_max": 0.2, **target.pop("runner", {})},
        "targets": {"emu": {"protocol": protocol, "base_url": base_url, "model": "emulator-1", **target}},
    })


def _stored(tmp_path, run_id):
    store = Store.open(f"sqlite:///{tmp_path}/prober.db")
    try:
        return store.get_run(run_id), store.samples(run_id), store.metrics(run_id)
    finally:
        store.close()


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
@timing_sensitive     # 64 streams and the emulator share 2 cores: one burst of outside load costs ms
def test_ttft_matches_ground_truth_and_knee_is_found(tmp_path, protocol):
    # A request holds its slot 30 ms to the first token plus 8 tokens at 300/s (57 ms): one queued
    # behind a full set of slots waits about that long, so its TTFT is near 3x the unqueued 30 ms.
    scenario = (f"first_token_delay_ms = 30\nprefill_ms_per_token = 0\ndecode_tokens_per_s = 300\n"
                f"output_tokens = 8\nslots = {SLOTS}\n")
    # What a bare asyncio client and server on this machine, now, add to a 30 ms first byte at each level.
    reference = {level: asyncio.run(reference_lateness(0.03, REQUESTS, concurrent=level)).client for level in LEVELS}
    with emulator_process(tmp_path, scenario) as base_url:
        result = Runner(_config(tmp_path, base_url, protocol)).run(
            "latency", ["emu"], {"levels": LEVELS, "requests_per_level": REQUESTS, "warmup": 2,
                                 "max_tokens": 8, "input_tokens": 16})
        truth = ground_truth(base_url)
    assert result.exit_code == 0, result.problems
    run, rows, metrics = _stored(tmp_path, result.run_id)
    assert run["status"] == "complete"
    measured = defaultdict(list)
    expected = defaultdict(list)
    for row in rows:
        assert row["error_type"] is None
        if row["labels"]["phase"] != "measure":
            continue
        level = row["labels"]["concurrency"]
        measured[level].append(row["ttft_ms"])
        expected[level].append(truth[row["request_id"]]["ttft_ms"])
    for level in LEVELS:
        assert len(measured[level]) == REQUESTS
        gap = stats.median(measured[level]) - stats.median(expected[level])
        assert abs(gap) <= median_allowed(reference[level], CLIENT_MEDIAN_RATIO), \
            f"c={level}: measured p50 {stats.median(measured[level]):.1f} ms, truth " \
            f"{stats.median(expected[level]):.1f} ms; a bare client here: {reference[level]}"
    by_name = {(m["name"], m["labels"].get("concurrency")): m for m in metrics}
    # No queueing up to the slot count; the first level beyond it queues, so TTFT more than doubles.
    knee = by_name[("knee_concurrency", None)]
    assert knee["value"] == 2 * SLOTS
    # Its bootstrap interval holds the emulator's known knee and no level without queueing.
    assert SLOTS < knee["ci_low"] <= 2 * SLOTS <= (knee["ci_high"] or float("inf"))
    assert by_name[("ttft_p50_ms", SLOTS)]["value"] < 1.5 * by_name[("ttft_p50_ms", 1)]["value"]
    assert by_name[("error_rate", 1)]["value"] == 0
    assert by_name[("goodput", 1)]["value"] == 1


FAULTS = [
    ("rate_limit", "rate_limited"),
    ("overloaded", "overloaded"),
    ("server_error", "server_error"),
    ("drop_mid_stream", "connection"),
    ("malformed_sse", "protocol"),
    ("stall", "timeout"),
]


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
@pytest.mark.parametrize("fault,error_type", FAULTS)
def test_each_fault_is_stored_typed_retried_and_the_run_completes(tmp_path, protocol, fault, error_type):
    scenario = (f"first_token_delay_ms = 5\ndecode_tokens_per_s = 500\noutput_tokens = 8\nseed = 7\n"
                f"[faults]\n{fault} = 0.25\nretry_after_s = 0\nstall_s = 3\nafter_tokens = 2\n")
    with emulator_process(tmp_path, scenario) as base_url:
        config = _config(tmp_path, base_url, protocol, timeouts={"read": 0.5},
                         runner={"max_retries": 8})
        result = Runner(config).run("latency", ["emu"], {"levels": [1, 4], "requests_per_level": 24,
                                                         "warmup": 0, "max_tokens": 8, "input_tokens": 8})
    assert result.exit_code == 0, result.problems
    run, rows, _ = _stored(tmp_path, result.run_id)
    assert run["status"] == "complete"
    failed = [r for r in rows if r["error_type"]]
    assert failed, "a 25% fault rate over 48 requests produced no error sample"
    assert {r["error_type"] for r in failed} == {error_type}
    # Every failed attempt was retried and stored; each logical request ends with one final attempt.
    assert all(not r["final"] for r in failed)
    retries = [r for r in rows if r["attempt"] > 1]
    assert len(retries) >= len(failed)
    finals = [r for r in rows if r["final"]]
    assert len(finals) == 48 and all(r["error_type"] is None for r in finals)
    assert len({r["request_index"] for r in rows}) == 48
