"""The emulator's Anthropic prompt cache, through its HTTP server: each documented rule."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import anthropic
import pytest

from prober.core.errors import ConfigError
from prober.emulator import Scenario, load_scenario
from prober.emulator.tokenizer import count_tokens
from tests.support.emulator import ManualClock, RawConnection, cache_on_clock, raw_request, run, running

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]

FAST_SETTINGS = {"first_token_delay_ms": 1, "decode_tokens_per_s": 5000, "output_tokens": 3}
FAST = Scenario(**FAST_SETTINGS)
EPHEMERAL = {"type": "ephemeral"}


def fast(**overrides: Any) -> Scenario:
    """FAST with overrides, nested tables ([cache], [faults]) given as dicts and validated."""
    return Scenario(**{**FAST_SETTINGS, **overrides})


def words(n: int, tag: str = "w") -> str:
    """Exactly n tokens, all different."""
    return " ".join(f"{tag}{i}" for i in range(n))


def request(system: str | list, user: Any = "What now?", *, model: str = "emulator-1", stream: bool = False,
            **extra: Any) -> dict[str, Any]:
    if isinstance(system, str):
        system = [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
    return {"model": model, "max_tokens": 16, "stream": stream, "system": system,
            "messages": [{"role": "user", "content": user}], **extra}


def usage_of(response) -> dict[str, Any]:
    """Usage from a plain body or from a stream's message_start."""
    if response.headers["content-type"].startswith("text/event-stream"):
        name, data = response.events()[0]
        assert name == "message_start"
        return json.loads(data)["message"]["usage"]
    return response.json()["usage"]


async def send_all(port: int, bodies: list[dict]) -> list[dict]:
    """Send bodies one after another; return each usage, checked against count_tokens."""
    usages = []
    for body in bodies:
        response = await raw_request(port, "POST", "/v1/messages", body)
        assert response.status == 200, response.body
        usage = usage_of(response)
        counted = (await raw_request(port, "POST", "/v1/messages/count_tokens", body)).json()["input_tokens"]
        assert usage["input_tokens"] + usage["cache_creation_input_tokens"] + usage["cache_read_input_tokens"] \
            == counted
        creation = usage.get("cache_creation")
        if creation is not None:
            assert creation["ephemeral_5m_input_tokens"] + creation["ephemeral_1h_input_tokens"] \
                == usage["cache_creation_input_tokens"]
        usages.append(usage)
    return usages


def cache_truth(emulator) -> list[dict]:
    return [record["behaviours"]["cache"] for record in emulator.ground_truth() if record["status"] == 200]


def serve(bodies: list[dict], scenario: Scenario = FAST, clock: ManualClock | None = None):
    async def scenario_run():
        behaviours = cache_on_clock(scenario, clock) if clock is not None else None
        async with running(scenario, behaviours) as emulator:
            usages = await send_all(emulator.port, bodies)
            return usages, cache_truth(emulator)
    return run(scenario_run())


# --- repeat, usage ------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_repeat_reads_from_the_second_request(stream) -> None:
    prefix = words(1500)
    bodies = [request(prefix, f"question {i}?", stream=stream) for i in range(5)]
    usages, truth = serve(bodies)
    user_tokens = count_tokens("question 0?")
    assert usages[0] == {"input_tokens": user_tokens, "cache_creation_input_tokens": 1500,
                         "cache_read_input_tokens": 0,
                         "cache_creation": {"ephemeral_5m_input_tokens": 1500, "ephemeral_1h_input_tokens": 0},
                         "output_tokens": 1 if stream else 3}
    for usage in usages[1:]:
        assert (usage["input_tokens"], usage["cache_creation_input_tokens"], usage["cache_read_input_tokens"]) \
            == (user_tokens, 0, 1500)
        assert usage["cache_creation"] == {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}
    assert truth[0]["miss_reason"] == "no_entry" and truth[0]["written_tokens"] == 1500
    assert truth[0]["breakpoints"] == [{"block": 0, "prefix_tokens": 1500, "ttl": "5m", "outcome": "no_entry",
                                        "matched_block": None, "wrote": True}]
    assert all(t["miss_reason"] is None and t["matched_breakpoint"] == 0 and t["matched_block"] == 0
               and t["read_tokens"] == 1500 for t in truth[1:])


def test_no_breakpoint_no_cache_creation_object() -> None:
    body = request([{"type": "text", "text": words(1500)}])
    usages, truth = serve([body, body])
    assert usages[1] == {"input_tokens": 1500 + count_tokens("What now?"), "cache_creation_input_tokens": 0,
                         "cache_read_input_tokens": 0, "output_tokens": 3}
    assert truth[1]["miss_reason"] == "no_breakpoint"


def test_top_level_cache_control_marks_the_last_block() -> None:
    body = request([{"type": "text", "text": words(1200)}], "Hello there", cache_control=EPHEMERAL)
    usages, truth = serve([body, body])
    total = 1200 + count_tokens("Hello there")
    assert usages[0]["cache_creation_input_tokens"] == total and usages[0]["input_tokens"] == 0
    assert usages[1]["cache_read_input_tokens"] == total and usages[1]["input_tokens"] == 0
    assert truth[1]["matched_block"] == 1


def test_a_hit_shortens_prefill() -> None:
    body = request(words(2000))

    async def scenario_run():
        async with running(fast(prefill_ms_per_token=0.05)) as emulator:
            await send_all(emulator.port, [body, body])
            return emulator.ground_truth()

    cold, warm = run(scenario_run())
    assert cold["scheduled_ttft_ms"] > 100 and warm["scheduled_ttft_ms"] < 5   # 2,003 tokens vs 3 to prefill


def test_usage_fields_off_still_caches() -> None:
    scenario = fast(cache_usage_fields=False, prefill_ms_per_token=0.05)
    body = request(words(2000))

    async def scenario_run():
        async with running(scenario) as emulator:
            responses = [await raw_request(emulator.port, "POST", "/v1/messages", body) for _ in range(2)]
            return [r.json()["usage"] for r in responses], emulator.ground_truth()

    usages, truth = run(scenario_run())
    assert usages[1] == {"input_tokens": 2000 + count_tokens("What now?"), "output_tokens": 3}
    assert truth[1]["behaviours"]["cache"]["read_tokens"] == 2000
    assert truth[1]["scheduled_ttft_ms"] < truth[0]["scheduled_ttft_ms"] - 50


def test_disabled_never_hits() -> None:
    scenario = fast(cache={"enabled": False})
    body = request(words(1500))
    usages, truth = serve([body, body, body], scenario)
    assert all(u["cache_read_input_tokens"] == 0 and u["cache_creation_input_tokens"] == 0 for u in usages)
    assert all(u["cache_creation"] == {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}
               for u in usages)
    assert [t["miss_reason"] for t in truth] == ["disabled"] * 3


# --- volatile values ----------------------------------------------------------------------------

@pytest.mark.parametrize("where, hits", [("start", False), ("middle", False), ("before_breakpoint", False),
                                         ("after_breakpoint", True)])
def test_volatile_value(where, hits) -> None:
    bodies = []
    for i in range(4):
        stamp = f"Current date: 2026-08-0{i + 1} 10:{i:02d}"
        head, tail = words(800, "a"), words(800, "b")
        system = {"start": f"{stamp} {head} {tail}", "middle": f"{head} {stamp} {tail}",
                  "before_breakpoint": f"{head} {tail} {stamp}"}.get(where, f"{head} {tail}")
        user = f"{stamp} What now?" if where == "after_breakpoint" else "What now?"
        bodies.append(request(system, user))
    usages, truth = serve(bodies)
    reads = [u["cache_read_input_tokens"] for u in usages]
    if hits:
        assert reads == [0] + [1600] * 3
    else:
        assert reads == [0, 0, 0, 0]
        assert all(u["cache_creation_input_tokens"] > 1600 for u in usages)   # pays for a write every time
        assert {t["miss_reason"] for t in truth} == {"no_entry"}


# --- the 20-block lookback ----------------------------------------------------------------------

def conversation(growth: int, breakpoints_every: int | None = None) -> tuple[dict, dict, int]:
    """A first request with a breakpoint on its last block, and the conversation grown by `growth`
    content blocks (tool_use / tool_result messages) with a breakpoint on the new last block (and,
    optionally, on every `breakpoints_every`-th new block). Returns both and the first's prefix."""
    system = [{"type": "text", "text": words(1200)}]
    start = {"role": "user", "content": [{"type": "text", "text": "Start the task.", "cache_control": EPHEMERAL}]}
    first = {"model": "emulator-1", "max_tokens": 16, "system": system, "messages": [start]}
    grown = [{"role": "user", "content": [{"type": "text", "text": "Start the task."}]}]
    for i in range(growth):
        if i % 2 == 0:
            block = {"type": "tool_use", "id": f"toolu_{i}", "name": "lookup", "input": {"n": i}}
            role = "assistant"
        else:
            block = {"type": "tool_result", "tool_use_id": f"toolu_{i - 1}", "content": f"result {i}"}
            role = "user"
        if i == growth - 1 or (breakpoints_every and (i + 1) % breakpoints_every == 0):
            block["cache_control"] = EPHEMERAL
        grown.append({"role": role, "content": [block]})
    second = {**first, "messages": grown}
    return first, second, 1200 + count_tokens("Start the task.")


@pytest.mark.parametrize("growth", [1, 4, 10, 16, 20])
def test_lookback_reaches_20_blocks(growth) -> None:
    first, second, prefix = conversation(growth)
    usages, truth = serve([first, second])
    assert usages[1]["cache_read_input_tokens"] == prefix
    assert truth[1]["matched_block"] == 1 and truth[1]["breakpoints"][0]["block"] == 1 + growth


@pytest.mark.parametrize("growth", [21, 22, 30])
def test_lookback_misses_past_20_blocks(growth) -> None:
    first, second, _prefix = conversation(growth)
    usages, truth = serve([first, second])
    assert usages[1]["cache_read_input_tokens"] == 0
    assert usages[1]["cache_creation_input_tokens"] == truth[1]["prompt_tokens"]
    assert truth[1]["miss_reason"] == "lookback_exceeded"


@pytest.mark.parametrize("growth", [22, 30, 44])
def test_a_breakpoint_every_15_blocks_recovers_the_lookback(growth) -> None:
    first, second, prefix = conversation(growth, breakpoints_every=15)
    usages, truth = serve([first, second])
    assert usages[1]["cache_read_input_tokens"] == prefix
    assert truth[1]["matched_breakpoint"] == 0 and truth[1]["matched_block"] == 1
    assert usages[1]["cache_creation_input_tokens"] == truth[1]["prompt_tokens"] - prefix


def test_lookback_knob() -> None:
    first, second, _prefix = conversation(8)
    usages, truth = serve([first, second], fast(cache={"lookback_blocks": 5}))
    assert usages[1]["cache_read_input_tokens"] == 0 and truth[1]["miss_reason"] == "lookback_exceeded"


# --- minimum cacheable prefix ---------------------------------------------------------------------

@pytest.mark.parametrize("model, minimum", [("claude-opus-4-5-20251101", 4096), ("claude-haiku-4-5", 4096),
                                            ("claude-sonnet-4-6", 2048), ("claude-3-5-haiku-20241022", 2048),
                                            ("claude-sonnet-4-20250514", 1024), ("emulator-1", 1024)])
def test_minimum_cacheable_prefix_per_model(model, minimum) -> None:
    short, long = request(words(minimum - 1), model=model), request(words(minimum), model=model)
    usages, truth = serve([short, short, long, long])
    assert [(u["cache_creation_input_tokens"], u["cache_read_input_tokens"]) for u in usages] \
        == [(0, 0), (0, 0), (minimum, 0), (0, minimum)]
    assert usages[0]["input_tokens"] == truth[0]["prompt_tokens"]
    assert [t["miss_reason"] for t in truth[:2]] == ["below_minimum"] * 2
    assert all(t["minimum_tokens"] == minimum for t in truth)


def test_minimum_knobs() -> None:
    scenario = fast(cache={"min_tokens": {"emulator-1": 300}, "default_min_tokens": 50})
    bodies = [request(words(299)), request(words(299)), request(words(300)), request(words(300)),
              request(words(60), model="other"), request(words(60), model="other"),
              request(words(4095), model="claude-opus-4-8"), request(words(4096), model="claude-opus-4-8")]
    usages, _ = serve(bodies, scenario)
    assert [u["cache_read_input_tokens"] for u in usages] == [0, 0, 0, 300, 0, 60, 0, 0]
    assert [u["cache_creation_input_tokens"] for u in usages] == [0, 0, 300, 0, 60, 0, 0, 4096]


# --- fan-out: readable only once the writer streams -------------------------------------------------

def test_fanout_simultaneous_all_write_staggered_reads() -> None:
    n = 6
    scenario = fast(first_token_delay_ms=150, decode_tokens_per_s=100, output_tokens=10, slots=16)

    async def scenario_run():
        async with running(scenario) as emulator:
            port = emulator.port
            bodies = [request(words(1500, "f"), f"question {i}?", stream=True) for i in range(n)]
            simultaneous = await asyncio.gather(*(raw_request(port, "POST", "/v1/messages", b) for b in bodies))
            first_truth = cache_truth(emulator)

            bodies = [request(words(1500, "s"), f"question {i}?", stream=True) for i in range(n)]
            connection = await RawConnection.open(port)
            leader = await connection.request_until("POST", "/v1/messages", bodies[0], b"content_block_delta")
            followers = await asyncio.gather(*(raw_request(port, "POST", "/v1/messages", b) for b in bodies[1:]))
            await connection.finish(leader)
            await connection.close()
            return simultaneous, first_truth, [leader, *followers], cache_truth(emulator)[n:]

    simultaneous, simultaneous_truth, staggered, staggered_truth = run(scenario_run())
    assert [usage_of(r)["cache_read_input_tokens"] for r in simultaneous] == [0] * n
    assert [usage_of(r)["cache_creation_input_tokens"] for r in simultaneous] == [1500] * n
    assert sorted(t["miss_reason"] for t in simultaneous_truth) == ["no_entry"] + ["not_yet_readable"] * (n - 1)
    assert all(r.complete for r in staggered)
    assert [usage_of(r)["cache_read_input_tokens"] for r in staggered] == [0] + [1500] * (n - 1)
    assert [t["miss_reason"] for t in staggered_truth] == ["no_entry"] + [None] * (n - 1)


def test_a_request_that_never_streams_leaves_no_entry() -> None:
    scenario = fast(faults={"fail_first_n": 1, "fail_first_kind": "overloaded"})

    async def scenario_run():
        async with running(scenario) as emulator:
            body = request(words(1500))
            failed = await raw_request(emulator.port, "POST", "/v1/messages", body)
            usages = await send_all(emulator.port, [body, body])
            return failed, usages, emulator.ground_truth()

    failed, usages, truth = run(scenario_run())
    assert failed.status == 529
    assert [u["cache_read_input_tokens"] for u in usages] == [0, 1500]
    assert truth[1]["behaviours"]["cache"]["miss_reason"] == "no_entry"


def test_reset_clears_the_cache() -> None:
    async def scenario_run():
        async with running(FAST) as emulator:
            body = request(words(1500))
            before = await send_all(emulator.port, [body, body])
            await raw_request(emulator.port, "POST", "/_emulator/reset")
            after = await send_all(emulator.port, [body])
            return before, after

    before, after = run(scenario_run())
    assert before[1]["cache_read_input_tokens"] == 1500 and after[0]["cache_read_input_tokens"] == 0


# --- invalidation tiers -------------------------------------------------------------------------

def tiered_request() -> dict[str, Any]:
    tools = [{"name": f"tool_{i}", "description": words(120, f"t{i}x"),
              "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}} for i in range(3)]
    tools[-1]["cache_control"] = EPHEMERAL
    return {"model": "emulator-1", "max_tokens": 16, "tools": tools,
            "system": [{"type": "text", "text": words(600, "s"), "cache_control": EPHEMERAL}],
            "messages": [{"role": "user", "content": words(300, "m")},
                         {"role": "assistant", "content": "Noted."},
                         {"role": "user", "content": [{"type": "text", "text": "Go on.", "cache_control": EPHEMERAL}]}]}


def _change(body: dict[str, Any], what: str) -> dict[str, Any]:
    body = copy.deepcopy(body)
    last_user = body["messages"][-1]["content"]
    if what == "tools":
        body["tools"][0]["description"] += " (v2)"
    elif what == "model":
        body["model"] = "emulator-2"
    elif what == "system":
        body["system"][0]["text"] = "Be terse. " + body["system"][0]["text"]
    elif what == "speed":
        body["speed"] = "fast"
    elif what == "web_search":
        body["tools"].append({"type": "web_search_20250305", "name": "web_search", "max_uses": 3})
    elif what == "citations":
        last_user.append({"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"},
                          "citations": {"enabled": True}})
    elif what == "tool_choice":
        body["tool_choice"] = {"type": "any"}
    elif what == "thinking":
        body["thinking"] = {"type": "enabled", "budget_tokens": 2048}
    elif what == "images":
        last_user.append({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}})
    elif what == "message":
        body["messages"][0]["content"] = "Changed. " + body["messages"][0]["content"]
    return body


TIERS = {"tools": "none", "model": "none", "system": "tools", "speed": "tools", "web_search": "tools",
         "citations": "tools", "tool_choice": "system", "thinking": "system", "images": "system",
         "message": "system", "nothing": "messages"}


def test_invalidation_tiers_match_the_table() -> None:
    base = tiered_request()
    changes = list(TIERS)
    scenario = fast(cache={"min_tokens": {"emulator-1": 64, "emulator-2": 64}})
    usages, truth = serve([base, *(_change(base, what) for what in changes)], scenario)
    tools_tokens, system_tokens, messages_tokens = (b["prefix_tokens"] for b in truth[0]["breakpoints"])
    assert 64 <= tools_tokens < system_tokens < messages_tokens
    kept = {"none": 0, "tools": tools_tokens, "system": system_tokens, "messages": messages_tokens}
    # (images and documents are added after the last breakpoint: only the tier settings move)
    assert {what: usage["cache_read_input_tokens"] for what, usage in zip(changes, usages[1:])} \
        == {what: kept[tier] for what, tier in TIERS.items()}
    assert all(t["breakpoints"][0]["prefix_tokens"] == tools_tokens for t in truth[1:] if t is not truth[1])


# --- TTL ----------------------------------------------------------------------------------------

def test_ttl_5m_expires_and_reads_refresh_it() -> None:
    clock = ManualClock()
    body = request(words(1500))

    async def scenario_run():
        async with running(FAST, cache_on_clock(FAST, clock)) as emulator:
            reads = []
            for step in (0, 299, 299, 299, 301):
                clock.advance(step)
                reads.append((await send_all(emulator.port, [body]))[0]["cache_read_input_tokens"])
            return reads, cache_truth(emulator)

    reads, truth = run(scenario_run())
    assert reads == [0, 1500, 1500, 1500, 0]
    assert truth[-1]["miss_reason"] == "expired" and truth[-1]["written_tokens"] == 1500


def test_ttl_1h_and_mixed_ttls() -> None:
    clock = ManualClock()
    system = [{"type": "text", "text": words(1500), "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    user = [{"type": "text", "text": words(1100, "u"), "cache_control": {"type": "ephemeral", "ttl": "5m"}}]
    body = request(system, user)

    async def scenario_run():
        async with running(FAST, cache_on_clock(FAST, clock)) as emulator:
            usages = []
            for step in (0, 301, 3599, 3601):
                clock.advance(step)
                usages += await send_all(emulator.port, [body])
            return usages, cache_truth(emulator)

    usages, truth = run(scenario_run())
    assert usages[0]["cache_creation"] == {"ephemeral_5m_input_tokens": 1100, "ephemeral_1h_input_tokens": 1500}
    # 301 s: the 5m entry expired, the 1h one reads and the 5m stretch is written again
    assert (usages[1]["cache_read_input_tokens"], usages[1]["cache_creation"]["ephemeral_5m_input_tokens"]) \
        == (1500, 1100)
    # (the 5m breakpoint's lookback reaches the 1h entry one block back)
    assert [(b["outcome"], b["matched_block"], b["wrote"]) for b in truth[1]["breakpoints"]] \
        == [("hit", 0, False), ("hit", 0, True)]
    # 3599 s later: the read at 301 s refreshed the 1h entry; 3601 s after that it is gone
    assert usages[2]["cache_read_input_tokens"] == 1500
    assert usages[3]["cache_read_input_tokens"] == 0 and truth[3]["miss_reason"] == "expired"
    assert usages[3]["cache_creation"] == {"ephemeral_5m_input_tokens": 1100, "ephemeral_1h_input_tokens": 1500}


def test_time_scale_speeds_up_the_cache_clock() -> None:
    scenario = fast(cache={"time_scale": 300.0})   # 5m lasts 1 s

    async def scenario_run():
        async with running(scenario) as emulator:
            body = request(words(1500))
            first = await send_all(emulator.port, [body, body])
            await asyncio.sleep(1.1)
            return first + await send_all(emulator.port, [body])

    assert [u["cache_read_input_tokens"] for u in run(scenario_run())] == [0, 1500, 0]


# --- breakpoint validation ----------------------------------------------------------------------

def _blocks(n: int, marked: int) -> list[dict]:
    return [{"type": "text", "text": f"part {i}", **({"cache_control": EPHEMERAL} if i < marked else {})}
            for i in range(n)]


MARKED_USER = [{"type": "text", "text": "Go on.", "cache_control": EPHEMERAL}]
TOO_MANY = "A maximum of 4 blocks with cache_control may be provided. Found 5."


@pytest.mark.parametrize("body, message", [
    (request(_blocks(5, 4)), None),
    (request(_blocks(5, 5)), TOO_MANY),
    (request(_blocks(3, 3), MARKED_USER, tools=[{"name": "t", "input_schema": {}, "cache_control": EPHEMERAL}]),
     TOO_MANY),
    (request(_blocks(5, 4), cache_control=EPHEMERAL), TOO_MANY),      # the top-level one marks a fifth block
    (request(_blocks(3, 3), MARKED_USER, cache_control=EPHEMERAL), None),   # the last block, already marked
    (request([{"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "2h"}}]),
     "cache_control.ttl: Input should be '5m' or '1h'"),
    (request([{"type": "text", "text": "x", "cache_control": {"type": "persistent"}}]),
     "cache_control.type: Input should be 'ephemeral'"),
])
def test_breakpoint_validation(body, message) -> None:
    async def scenario_run():
        async with running(fast(cache={"enabled": False})) as emulator:   # checked even with caching off
            return await raw_request(emulator.port, "POST", "/v1/messages", body)

    response = run(scenario_run())
    if message is None:
        assert response.status == 200, response.body
    else:
        assert response.status == 400
        assert response.json()["error"] == {"type": "invalid_request_error", "message": message}


# --- scenario ----------------------------------------------------------------------------------

def test_cache_table_in_a_scenario_file(tmp_path) -> None:
    path = tmp_path / "cache.toml"
    path.write_text('[cache]\nenabled = false\ntime_scale = 60\nlookback_blocks = 10\n'
                    '[cache.min_tokens]\nemulator-1 = 256\n')
    cache = load_scenario(path).cache
    assert (cache.enabled, cache.time_scale, cache.lookback_blocks) == (False, 60, 10)
    assert cache.min_tokens["emulator-1"] == 256 and cache.min_tokens["claude-opus-4-5"] == 4096
    assert Scenario().cache.openai_min_tokens == 1024 and Scenario().cache.openai_step_tokens == 128
    path.write_text("[cache]\nlookbak = 3\n")
    with pytest.raises(ConfigError, match="cache.lookbak: unknown key"):
        load_scenario(path)


# --- the official SDK ---------------------------------------------------------------------------

def test_anthropic_sdk_parses_cache_usage() -> None:
    system = [{"type": "text", "text": words(1500), "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    messages = [{"role": "user", "content": "What now?"}]

    async def scenario_run():
        async with running(FAST) as emulator:
            client = anthropic.AsyncAnthropic(base_url=emulator.base_url, api_key="x", max_retries=0)
            cold = await client.messages.create(model="emulator-1", max_tokens=16, system=system, messages=messages)
            async with client.messages.stream(model="emulator-1", max_tokens=16, system=system,
                                              messages=messages) as stream:
                start = None
                async for event in stream:
                    if event.type == "message_start":
                        start = event.message.usage
                warm = await stream.get_final_message()
            counted = await client.messages.count_tokens(model="emulator-1", system=system, messages=messages)
            await client.close()
            return cold.usage, start, warm.usage, counted.input_tokens

    cold, start, warm, counted = run(scenario_run())
    assert (cold.input_tokens, cold.cache_creation_input_tokens, cold.cache_read_input_tokens) \
        == (counted - 1500, 1500, 0)
    assert cold.cache_creation.ephemeral_1h_input_tokens == 1500
    assert cold.cache_creation.ephemeral_5m_input_tokens == 0
    assert (start.cache_read_input_tokens, start.cache_creation_input_tokens) == (1500, 0)
    assert warm.cache_read_input_tokens == 1500 and warm.input_tokens == counted - 1500
