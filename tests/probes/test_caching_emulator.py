"""The caching suite end to end against `prober emulate`: each case finds the scenario's truth, and
its numbers agree with the emulator's own record of every request."""

from __future__ import annotations

import json

import pytest

from tests.support.emulated import run_suite_on_emulator

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(180)]

# Fast enough to keep each test to seconds, with prefill slow enough that a hit's TTFT is visibly
# lower than a cold request's (1,500 tokens: 75 ms cold).
FAST = ("first_token_delay_ms = 2\nprefill_ms_per_token = 0.05\ndecode_tokens_per_s = 2000\n"
        "output_tokens = 4\nslots = 16\n")
PREFIX = 1500


def _run(tmp_path, scenario: str, params: dict, protocol: str = "anthropic", **target):
    """Run the caching suite against an emulator serving `scenario`; return (metrics by
    (name, labels), stored rows, ground truth by request id)."""
    rows, metric_rows, truth = run_suite_on_emulator(
        tmp_path, FAST + scenario, protocol, "caching", {"prefix_tokens": PREFIX, "max_tokens": 4, **params}, target)
    assert rows and all(r["error_type"] is None for r in rows)
    return {(m["name"], json.dumps(m["labels"], sort_keys=True)): m for m in metric_rows}, rows, truth


def value(metrics, name: str, **labels) -> float | None:
    return metrics[(name, json.dumps(labels, sort_keys=True))]["value"]


def cache_truth(truth, row) -> dict:
    return truth[row["request_id"]]["behaviours"]["cache"]


@pytest.mark.parametrize("ttl,pricing,write,read", [
    ("5m", None, 1.25, 0.1),
    ("1h", {"cache_write_1h": 3.0, "cache_read": 0.2}, 3.0, 0.2),   # per-target override
])
def test_repeat_hits_and_cost_multiplier_matches_a_hand_calculation(tmp_path, ttl, pricing, write, read):
    target = {"pricing": pricing} if pricing else {}
    metrics, rows, truth = _run(tmp_path, "", {"cases": ["repeat"], "requests": 8, "ttl": ttl}, **target)
    rows.sort(key=lambda r: r["labels"]["index"])
    assert len(rows) == 8
    records = [cache_truth(truth, r) for r in rows]
    # Every request reports what the emulator did, and total = input + creation + read = its prompt.
    for row, record in zip(rows, records):
        usage = row["usage"]
        assert usage["cache_read_input_tokens"] == record["read_tokens"]
        assert usage["cache_creation_input_tokens"] == record["written_tokens"]
        assert usage["input_tokens"] + record["read_tokens"] + record["written_tokens"] == record["prompt_tokens"]
    assert records[0]["read_tokens"] == 0 and records[0]["written_tokens"] > 1400
    assert all(r["read_tokens"] == records[0]["written_tokens"] for r in records[1:])

    assert value(metrics, "hit_rate", case="repeat") == 1.0
    later = records[1:]
    assert value(metrics, "read_fraction", case="repeat") == pytest.approx(
        sum(r["read_tokens"] for r in later) / sum(r["prompt_tokens"] for r in later))
    # By hand: uncached tokens at 1x, writes at the TTL's multiplier, reads at the read multiplier.
    by_hand = (sum(r["uncached_tokens"] + write * r["written_tokens"] + read * r["read_tokens"] for r in records)
               / sum(r["prompt_tokens"] for r in records))
    cost = value(metrics, "cost_multiplier", case="repeat", ttl=ttl, writes="reported")
    assert cost == pytest.approx(by_hand, rel=1e-12)
    # Hits skip prefill: TTFT well below the cold first request's, and the timing agrees.
    assert value(metrics, "ttft_hit_vs_first", case="repeat") < 0.8
    assert value(metrics, "timing_mismatch", case="usage") == 0.0
    assert value(metrics, "usage_consistent", case="usage") == 1.0


def test_volatile_value_before_the_breakpoint_kills_the_cache_after_it_does_not(tmp_path):
    metrics, rows, truth = _run(tmp_path, "", {"cases": ["volatile"], "requests": 4})
    for position in ("system_start", "system_middle", "before_breakpoint"):
        assert value(metrics, "hit_rate", case="volatile", position=position) == 0.0
        assert value(metrics, "cached_tokens_p50", case="volatile", position=position) == 0
        later = [r for r in rows if r["labels"]["position"] == position and r["labels"]["index"] > 0]
        assert [cache_truth(truth, r)["miss_reason"] for r in later] == ["no_entry"] * 3
    assert value(metrics, "hit_rate", case="volatile", position="user_turn") == 1.0
    assert value(metrics, "read_fraction", case="volatile", position="user_turn") > 0.9


def test_lookback_limit_is_found_at_20_and_extra_breakpoints_recover_it(tmp_path):
    metrics, rows, truth = _run(tmp_path, "", {"cases": ["lookback"]})
    for n in (4, 10, 16, 20):
        assert value(metrics, "reads_previous", case="lookback", n=n, breakpoints="end") == 1.0
    for n in (22, 30):
        assert value(metrics, "read_tokens", case="lookback", n=n, breakpoints="end") == 0
        reader = next(r for r in rows if r["labels"]["n"] == n and r["labels"]["breakpoints"] == "end"
                      and r["labels"]["role"] == "reader")
        assert cache_truth(truth, reader)["miss_reason"] == "lookback_exceeded"
        assert value(metrics, "reads_previous", case="lookback", n=n, breakpoints="extra") == 1.0
    assert value(metrics, "lookback_limit", case="lookback") == 20
    assert value(metrics, "lookback_limit_found", case="lookback") == 1.0
    assert value(metrics, "extra_breakpoints_recover", case="lookback") == 1.0


def test_min_prefix_lands_within_one_bisection_step_of_the_scenario_minimum(tmp_path):
    minimum, step = 1500, 128
    metrics, rows, truth = _run(tmp_path, f'[cache]\nmin_tokens = {{"emulator-1" = {minimum}}}\n',
                                {"cases": ["min_prefix"], "min_prefix_low": 256, "min_prefix_high": 4096,
                                 "min_prefix_resolution": step, "documented_min_prefix": {"emulator-1": minimum}})
    found = value(metrics, "min_prefix_tokens", case="min_prefix")
    below = value(metrics, "largest_uncached_tokens", case="min_prefix")
    assert below < minimum <= found
    assert found - minimum <= step and minimum - below <= step
    assert value(metrics, "documented_min_prefix_tokens", case="min_prefix") == minimum
    assert value(metrics, "min_prefix_agrees", case="min_prefix") == 1.0
    # Prefixes were measured with count_tokens, which is what the emulator's minimum applies to.
    readers = [r for r in rows if r["labels"].get("role") == "reader"]
    assert {r["labels"]["counted_by"] for r in readers} == {"count_tokens"}
    for reader in readers:
        record = cache_truth(truth, reader)
        assert (record["read_tokens"] > 0) == (reader["labels"]["prefix_tokens"] >= minimum)


def test_fanout_at_once_gets_no_hits_and_after_the_first_token_gets_n_minus_1(tmp_path):
    metrics, rows, truth = _run(tmp_path, "", {"cases": ["fanout"], "fanout_requests": 8})
    assert value(metrics, "hits", case="fanout", pattern="simultaneous") == 0
    assert value(metrics, "hit_rate", case="fanout", pattern="simultaneous") == 0.0
    assert value(metrics, "hits", case="fanout", pattern="staggered") == 7
    assert value(metrics, "followers_after_first_token", case="fanout", pattern="staggered") == 1.0
    at_once = [cache_truth(truth, r) for r in rows if r["labels"]["pattern"] == "simultaneous"]
    assert sum(1 for r in at_once if r["miss_reason"] == "not_yet_readable") == 7


def test_tiers_match_the_invalidation_table(tmp_path):
    metrics, rows, truth = _run(tmp_path, "", {"cases": ["tiers"]})
    assert value(metrics, "tier_match_rate", case="tiers") == 1.0
    for row in rows:
        change = row["labels"]["change"]
        if change == "base":
            continue
        labels = {"case": "tiers", "change": change, "expected_tier": row["labels"]["expected_tier"]}
        assert value(metrics, "tier_match", **labels) == 1.0
        assert value(metrics, "read_tokens", **labels) == cache_truth(truth, row)["read_tokens"]
    # The tier boundaries came from count_tokens and are what the emulator read.
    assert value(metrics, "read_tokens", case="tiers", change="none", expected_tier="messages") == \
        value(metrics, "expected_read_tokens", case="tiers", change="none", expected_tier="messages")


def test_ttl_entry_expires_after_the_wait(tmp_path):
    # time_scale 300: the 5-minute TTL lasts one real second.
    metrics, rows, truth = _run(tmp_path, "[cache]\ntime_scale = 300\n", {"cases": ["ttl"], "ttl_wait_s": 1.5})
    assert value(metrics, "hit_before_wait", case="ttl", ttl="5m") == 1.0
    assert value(metrics, "hit_after_wait", case="ttl", ttl="5m") == 0.0
    after = next(r for r in rows if r["labels"]["role"] == "after_wait")
    assert cache_truth(truth, after)["miss_reason"] == "expired"


def test_openai_protocol_caches_automatically_and_skips_anthropic_only_cases(tmp_path):
    metrics, rows, truth = _run(tmp_path, "", {"cases": ["repeat", "lookback", "tiers", "fanout"], "requests": 4},
                                protocol="openai")
    assert value(metrics, "hit_rate", case="repeat") == 1.0
    for row in rows:
        cached = row["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached == cache_truth(truth, row)["read_tokens"]
        assert cached == 0 or (cached >= 1024 and cached % 128 == 0)
    assert value(metrics, "skipped", case="lookback", reason="anthropic protocol only") == 1.0
    assert value(metrics, "skipped", case="tiers", reason="anthropic protocol only") == 1.0
    assert {r["case"] for r in rows} == {"repeat", "fanout"}
    assert value(metrics, "hits", case="fanout", pattern="simultaneous") == 0
    assert value(metrics, "hits", case="fanout", pattern="staggered") == 7   # N = 8 by default
    # No write field on the OpenAI side: writes assumed free, as before GPT-5.6.
    assert ("cost_multiplier", json.dumps({"case": "repeat", "ttl": "5m", "writes": "assumed"}, sort_keys=True)) \
        in metrics


def test_absent_cache_fields_are_reported_as_unavailable_not_as_misses(tmp_path):
    metrics, rows, _ = _run(tmp_path, "cache_usage_fields = false\n", {"cases": ["repeat"], "requests": 3})
    assert all("cache_read_input_tokens" not in r["usage"] for r in rows)
    assert value(metrics, "cache_reporting_available", case="usage") == 0.0
    assert value(metrics, "hit_rate", case="repeat") is None
    # The cache still works (TTFT drops) while nothing is reported: the timing cross-check flags it.
    assert value(metrics, "ttft_warm_vs_cold", case="usage") < 0.8
    assert value(metrics, "timing_mismatch", case="usage") == 1.0
