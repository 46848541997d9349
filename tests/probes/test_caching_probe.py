"""The caching probe's pure parts with canned inputs: reading usage, cost, tiers, parameters,
request shapes, and summaries of hand-made rows."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from prober.probes import caching_requests as rq
from prober.probes.caching import (
    CacheReads,
    CachingParams,
    CachingProbe,
    classify_tier,
    cost_multiplier,
    documented_minimum,
    prompt_total,
    reported_read,
    reported_write,
    usage_problems,
)

pytestmark = pytest.mark.unit


def anthropic(input_tokens, read=None, creation=None, **labels):
    usage = {"input_tokens": input_tokens, "output_tokens": 4}
    if read is not None:
        usage["cache_read_input_tokens"] = read
    if creation is not None:
        usage["cache_creation_input_tokens"] = creation
    return {"protocol": "anthropic", "usage": usage, "labels": labels, "error_type": None}


def openai(prompt, cached=None, write=None, **labels):
    usage = {"prompt_tokens": prompt, "completion_tokens": 4}
    details = {}
    if cached is not None:
        details["cached_tokens"] = cached
    if write is not None:
        details["cache_write_tokens"] = write
    if details:
        usage["prompt_tokens_details"] = details
    return {"protocol": "openai", "usage": usage, "labels": labels, "error_type": None}


def test_usage_readers_are_protocol_aware_and_keep_absent_apart_from_zero():
    hosted = anthropic(10, read=1000, creation=0)
    assert (reported_read(hosted), reported_write(hosted), prompt_total(hosted)) == (1000, 0, 1010)
    llama = anthropic(10, read=1023)            # /v1/messages on llama-server: no creation field
    assert reported_write(llama) is None and prompt_total(llama) == 1033
    assert reported_read(anthropic(1033)) is None
    assert (reported_read(openai(1034, cached=1024)), prompt_total(openai(1034, cached=1024))) == (1024, 1034)
    assert reported_read(openai(1034)) is None and reported_write(openai(1034, cached=0)) is None


def test_cache_reads_absent_field_is_zero_only_where_the_endpoint_reports_it_elsewhere():
    vllm = [openai(1200, cached=1024), openai(1200)]       # vLLM leaves cached_tokens out when 0
    reads = CacheReads(vllm)
    assert reads.available and [reads(r) for r in vllm] == [1024, 0]
    silent = [openai(1200), openai(1200)]
    reads = CacheReads(silent)
    assert not reads.available and [reads(r) for r in silent] == [None, None]
    failed = {**openai(1200, cached=0), "error_type": "server_error"}
    assert CacheReads([failed])(failed) is None


def test_cost_multiplier_with_reported_writes_is_the_hand_calculation():
    rows = [anthropic(10, read=0, creation=1000)] + [anthropic(10, read=1000, creation=0)] * 3
    value, writes = cost_multiplier(rows, CacheReads(rows), 1.25, 0.1)
    assert writes == "reported"
    assert value == pytest.approx((10 + 1250 + 3 * (10 + 100)) / (4 * 1010))
    # The seed article's break-even: two requests at 5m cost 1.35 against 2.0 uncached.
    pair = [anthropic(0, read=0, creation=1000), anthropic(0, read=1000, creation=0)]
    assert cost_multiplier(pair, CacheReads(pair), 1.25, 0.1)[0] == pytest.approx(1.35 / 2)


def test_cost_multiplier_prices_each_ttl_write_at_its_own_rate_where_usage_splits_them():
    # One request writes 600 tokens for 5 minutes and 400 for an hour (usage.cache_creation),
    # then three requests read all 1,000; the configured TTL (5m) would price all writes at 1.25.
    first = anthropic(10, read=0, creation=1000)
    first["usage"]["cache_creation"] = {"ephemeral_5m_input_tokens": 600, "ephemeral_1h_input_tokens": 400}
    rows = [first] + [anthropic(10, read=1000, creation=0)] * 3
    rates = {"5m": 1.25, "1h": 2.0}
    value, writes = cost_multiplier(rows, CacheReads(rows), 1.25, 0.1, rates)
    assert writes == "reported"
    # By hand: 10 uncached + 600 x 1.25 + 400 x 2 = 1,560 for the first; 10 + 100 for each later.
    assert value == pytest.approx((10 + 750 + 800 + 3 * 110) / (4 * 1010))
    # Without the rates (or without the split) every write is priced at the configured TTL.
    assert cost_multiplier(rows, CacheReads(rows), 1.25, 0.1)[0] == pytest.approx((10 + 1250 + 330) / 4040)
    plain = [anthropic(10, read=0, creation=1000)] + rows[1:]
    assert cost_multiplier(plain, CacheReads(plain), 2.0, 0.1, rates)[0] == pytest.approx((10 + 2000 + 330) / 4040)
    # A split that accounts for part of the writes: the remainder at the configured rate (1h here).
    part = anthropic(10, read=0, creation=1000)
    part["usage"]["cache_creation"] = {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 0}
    rows = [part] + rows[1:]
    assert cost_multiplier(rows, CacheReads(rows), 2.0, 0.1, rates)[0] == pytest.approx(
        (10 + 300 * 1.25 + 700 * 2.0 + 330) / 4040)


def test_cost_multiplier_assumes_hosted_billing_when_the_creation_field_is_absent():
    # llama-server through /v1/messages: input_tokens = prompt - cached, no creation field.
    rows = [anthropic(1033, read=0), anthropic(10, read=1023), anthropic(10, read=1023)]
    value, writes = cost_multiplier(rows, CacheReads(rows), 1.25, 0.1)
    assert writes == "assumed"
    # Assumed: the first request wrote the 1,023 tokens the later ones read.
    first = (1033 - 1023) + 1.25 * 1023
    later = 10 + 0.1 * 1023
    assert value == pytest.approx((first + 2 * later) / (3 * 1033))
    # OpenAI without cache_write_tokens: writes assumed free (pre-GPT-5.6 billing).
    rows = [openai(1034, cached=0), openai(1034, cached=1024)]
    value, writes = cost_multiplier(rows, CacheReads(rows), 1.25, 0.5)
    assert writes == "assumed" and value == pytest.approx((1034 + 10 + 0.5 * 1024) / 2068)


def test_usage_problems_flags_impossible_counts():
    assert usage_problems(openai(1000, cached=1024)) == ["cached_tokens above prompt_tokens"]
    assert usage_problems(anthropic(-1, read=0, creation=0)) == ["input_tokens is -1"]
    assert usage_problems({"protocol": "anthropic", "usage": {"output_tokens": 3}}) == ["input_tokens missing"]
    assert usage_problems(anthropic(10, read=1000, creation=0)) == []


def test_classify_tier_takes_the_nearest_boundary():
    bounds = {"tools": 1000, "system": 2000, "messages": 3000}
    assert [classify_tier(r, bounds, 64) for r in (None, 0, 40, 990, 2100, 2990)] == \
        [None, "none", "none", "tools", "system", "messages"]


def test_documented_minimum_matches_dated_ids_and_the_longest_key():
    table = CachingParams().documented_min_prefix
    assert documented_minimum("claude-sonnet-4-5-20250929", table) == 1024
    assert documented_minimum("claude-sonnet-4-6", table) == 2048     # not "claude-sonnet-4"
    assert documented_minimum("claude-haiku-4-5", table) == 4096
    assert documented_minimum("gpt-4o-mini", table) == 1024
    assert documented_minimum("SmolLM2-135M-Instruct", table) is None
    merged = CachingParams(documented_min_prefix={"claude-opus-5": 512}).documented_min_prefix
    assert merged["claude-opus-5"] == 512 and merged["claude-opus-4-5"] == 4096


@pytest.mark.parametrize("params,fragment", [
    ({"cases": ["repeat", "nope"]}, "unknown case 'nope'"),
    ({"volatile_positions": ["footer"]}, "unknown position 'footer'"),
    ({"lookback_blocks": [5]}, "not an even number"),
    ({"lookback_blocks": [70], "lookback_breakpoint_every": 15}, "more than 4 breakpoints"),
    ({"min_prefix_low": 512, "min_prefix_high": 256}, "min_prefix_high"),
])
def test_bad_parameters_are_rejected(params, fragment):
    with pytest.raises(ValidationError) as info:
        CachingParams(**params)
    assert fragment in str(info.value)


def test_sequence_requests_differ_only_in_the_last_user_message():
    a = rq.sequence_request("s1", 0, prefix_tokens=600, ttl="5m", max_tokens=4, protocol="anthropic")
    b = rq.sequence_request("s1", 1, prefix_tokens=600, ttl="5m", max_tokens=4, protocol="anthropic")
    assert a.system == b.system and a.tools == b.tools and a.messages != b.messages
    assert a.system[-1]["cache_control"] == {"type": "ephemeral"}
    assert "[s1]" in a.tools[0]["description"] and a.system[0]["text"].startswith("[s1]")
    hour = rq.sequence_request("s1", 0, prefix_tokens=600, ttl="1h", max_tokens=4, protocol="openai",
                               prompt_cache_key="team-a")
    assert hour.system[-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert hour.extra == {"prompt_cache_key": "team-a"}
    assert rq.sequence_request("s1", 0, prefix_tokens=600, ttl="5m", max_tokens=4, protocol="anthropic",
                               prompt_cache_key="team-a").extra == {}


@pytest.mark.parametrize("position", rq.VOLATILE_POSITIONS)
def test_volatile_stamp_goes_where_the_position_says(position):
    stamp = "2026-08-03T09:11:03.000001+00:00"
    request = rq.sequence_request("s", 1, prefix_tokens=600, ttl="5m", max_tokens=4, protocol="anthropic",
                                  stamp=stamp, position=position)
    system, user = request.system[0]["text"], request.messages[-1]["content"]
    assert (stamp in user) == (position == "user_turn")
    where = system.find(stamp)
    if position == "system_start":
        assert where == len("Current time: ")
    elif position == "system_middle":
        assert len(system) * 0.3 < where < len(system) * 0.7
    elif position == "before_breakpoint":
        assert system.endswith(stamp)
    else:
        assert where == -1


@pytest.mark.parametrize("n,every,marks", [(4, None, [4]), (22, 15, [15, 22]), (30, 15, [15, 30]),
                                           (60, 15, [15, 30, 45, 60])])
def test_lookback_conversation_grows_by_n_blocks_with_breakpoints_where_asked(n, every, marks):
    writer, reader = rq.lookback_conversation("s", n, every=every, ttl="5m")
    assert reader[0]["content"][0]["text"] == writer[0]["content"][0]["text"]
    assert "cache_control" in writer[0]["content"][0] and "cache_control" not in reader[0]["content"][0]
    new = reader[1]["content"] + reader[2]["content"]
    assert len(new) == n
    assert [i + 1 for i, block in enumerate(new) if "cache_control" in block] == marks
    uses = [b["id"] for b in reader[1]["content"]]
    assert uses == [b["tool_use_id"] for b in reader[2]["content"]]


def test_tiers_requests_change_exactly_one_thing():
    base = rq.tiers_request("s", "base", tier_tokens=300, ttl="5m", max_tokens=4)
    fields = ("tools", "system", "tool_choice", "messages", "extra")
    for change in rq.TIER_CHANGES:
        other = rq.tiers_request("s", change, tier_tokens=300, ttl="5m", max_tokens=4)
        differ = {f for f in fields if getattr(other, f) != getattr(base, f)}
        expected = {"thinking": {"extra"}, "none": set()}.get(change, {change})
        assert differ == expected, change
    breakpoints = [base.tools[-1], base.system[-1], base.messages[-1]["content"][-1]]
    assert all("cache_control" in block for block in breakpoints)


def _summarize(rows, **params):
    for i, row in enumerate(rows):
        row.setdefault("case", "repeat")
        row.setdefault("probe", "caching")
        row.setdefault("request_index", i)
        row.setdefault("ttft_ms", 100.0)
    metrics = CachingProbe().summarize(rows, CachingParams(**params), run_id="r", target="t")
    return {(m.name, json.dumps(m.labels, sort_keys=True)): m.value for m in metrics}


def repeat_row(row, index):
    row["labels"] = {"sequence": "s", "index": index, "ttl": "5m", "write_multiplier": 1.25,
                     "read_multiplier": 0.1}
    return row


def test_summary_flags_input_tokens_that_include_the_cached_ones():
    # A gateway reporting input_tokens as the whole prompt: input + read counts the prefix twice.
    rows = [repeat_row(anthropic(1010, read=0, creation=0), 0)] + \
           [repeat_row(anthropic(1010, read=1000, creation=0), i) for i in (1, 2, 3)]
    metrics = _summarize(rows, cases=["repeat"])
    assert metrics[("usage_consistent", '{"case": "usage"}')] == 0.25
    honest = [repeat_row(anthropic(10, read=0, creation=1000), 0)] + \
             [repeat_row(anthropic(10, read=1000, creation=0), i) for i in (1, 2, 3)]
    assert _summarize(honest, cases=["repeat"])[("usage_consistent", '{"case": "usage"}')] == 1.0


def test_summary_on_openai_reports_anthropic_only_cases_as_skipped():
    rows = [repeat_row(openai(1200, cached=0), 0), repeat_row(openai(1200, cached=1152), 1)]
    metrics = _summarize(rows, cases=["repeat", "lookback", "tiers"])
    assert metrics[("skipped", '{"case": "lookback", "reason": "anthropic protocol only"}')] == 1.0
    assert metrics[("skipped", '{"case": "tiers", "reason": "anthropic protocol only"}')] == 1.0
    assert metrics[("hit_rate", '{"case": "repeat"}')] == 1.0
    assert metrics[("read_fraction", '{"case": "repeat"}')] == pytest.approx(1152 / 1200)


def test_summary_hit_threshold_ignores_a_shared_template_header():
    rows = [repeat_row(openai(1200, cached=0), 0)] + [repeat_row(openai(1200, cached=7), i) for i in (1, 2)]
    metrics = _summarize(rows, cases=["repeat"])
    assert metrics[("hit_rate", '{"case": "repeat"}')] == 0.0
    assert _summarize(rows, cases=["repeat"], hit_min_tokens=5)[("hit_rate", '{"case": "repeat"}')] == 1.0
