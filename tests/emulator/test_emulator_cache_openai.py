"""The emulator's OpenAI automatic prompt caching: 1,024 tokens, 128-token steps, readable after the
writer's first token, TTL; through raw HTTP and the official SDK."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest

from prober.emulator import Scenario
from tests.emulator.test_emulator_cache import FAST_SETTINGS, fast, words
from tests.support.emulator import ManualClock, RawConnection, cache_on_clock, raw_request, run, running

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]

PATH = "/v1/chat/completions"


def chat(system: str, user: str = "What now?", *, model: str = "gpt-emu", stream: bool = False,
         **extra: Any) -> dict[str, Any]:
    body = {"model": model, "stream": stream, "messages": [{"role": "system", "content": system},
                                                           {"role": "user", "content": user}], **extra}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def usage_of(response) -> dict[str, Any]:
    if response.headers["content-type"].startswith("text/event-stream"):
        return json.loads(response.events()[-2][1])["usage"]
    return response.json()["usage"]


def cached(usage: dict[str, Any]) -> int:
    assert usage["prompt_tokens_details"]["cached_tokens"] <= usage["prompt_tokens"]
    return usage["prompt_tokens_details"]["cached_tokens"]


def serve(bodies: list[dict], scenario: Scenario | None = None, clock: ManualClock | None = None,
          advance: list[float] | None = None):
    scenario = scenario or Scenario(**FAST_SETTINGS)

    async def scenario_run():
        behaviours = cache_on_clock(scenario, clock) if clock is not None else None
        async with running(scenario, behaviours) as emulator:
            usages = []
            for i, body in enumerate(bodies):
                if advance:
                    clock.advance(advance[i])
                response = await raw_request(emulator.port, "POST", PATH, body)
                assert response.status == 200, response.body
                usages.append(usage_of(response))
            return usages, [record["behaviours"]["cache"] for record in emulator.ground_truth()]
    return run(scenario_run())


@pytest.mark.parametrize("prefix, expected", [(900, 0), (1021, 0), (1022, 1024), (1100, 1024), (1200, 1152),
                                              (1300, 1280), (2000, 1920)])
def test_repeat_reads_the_longest_128_step_at_or_above_1024(prefix, expected) -> None:
    body = chat(words(prefix), "Hi?")          # "Hi?" adds 2 tokens: prompt = prefix + 2
    usages, truth = serve([body, body, body])
    assert [cached(u) for u in usages] == [0, expected, expected]
    assert all(u["prompt_tokens"] == prefix + 2 for u in usages)
    assert truth[1]["read_tokens"] == expected
    assert truth[1]["miss_reason"] == (None if expected else "below_minimum")
    if expected:
        assert truth[0]["written_tokens"] == expected and truth[0]["miss_reason"] == "no_entry"


@pytest.mark.parametrize("stream", [False, True])
def test_shared_prefix_reads_up_to_the_last_whole_step(stream) -> None:
    usages, _ = serve([chat(words(1500), "First question?", stream=stream),
                       chat(words(1500), "Another one entirely?", stream=stream)])
    assert cached(usages[1]) == 1408            # 1,500 shared tokens: 11 steps of 128


def test_volatile_value_at_the_start_never_reads() -> None:
    usages, _ = serve([chat(f"Now: 10:0{i}. " + words(1500)) for i in range(3)])
    assert [cached(u) for u in usages] == [0, 0, 0]


def test_key_includes_model_and_prompt_cache_key() -> None:
    system = words(1500)
    usages, _truth = serve([chat(system, prompt_cache_key="tenant-a"), chat(system, prompt_cache_key="tenant-a"),
                           chat(system, prompt_cache_key="tenant-b"), chat(system, prompt_cache_key="tenant-a",
                                                                           model="gpt-emu-2")])
    assert [cached(u) for u in usages] == [0, 1408, 0, 0]


def test_roles_are_part_of_the_prefix() -> None:
    text = words(1500)
    as_user = {"model": "gpt-emu", "messages": [{"role": "user", "content": text}]}
    usages, _ = serve([chat(text), as_user])
    assert cached(usages[1]) == 0


def test_fanout_simultaneous_all_miss_staggered_read() -> None:
    n = 6
    scenario = fast(first_token_delay_ms=150, decode_tokens_per_s=100, output_tokens=10, slots=16)

    async def scenario_run():
        async with running(scenario) as emulator:
            port = emulator.port
            bodies = [chat(words(1500, "f"), f"question {i}?", stream=True) for i in range(n)]
            simultaneous = await asyncio.gather(*(raw_request(port, "POST", PATH, b) for b in bodies))
            bodies = [chat(words(1500, "s"), f"question {i}?", stream=True) for i in range(n)]
            connection = await RawConnection.open(port)
            leader = await connection.request_until("POST", PATH, bodies[0], b'"delta":{"content":')
            followers = await asyncio.gather(*(raw_request(port, "POST", PATH, b) for b in bodies[1:]))
            await connection.finish(leader)
            await connection.close()
            truth = [record["behaviours"]["cache"] for record in emulator.ground_truth()]
            return simultaneous, [leader, *followers], truth

    simultaneous, staggered, truth = run(scenario_run())
    assert [cached(usage_of(r)) for r in simultaneous] == [0] * n
    assert sorted(t["miss_reason"] for t in truth[:n]) == ["no_entry"] + ["not_yet_readable"] * (n - 1)
    assert [cached(usage_of(r)) for r in staggered] == [0] + [1408] * (n - 1)


def test_ttl_refreshed_by_reads_and_24h_retention() -> None:
    short, long = chat(words(1500)), chat(words(1500, "r"), prompt_cache_retention="24h")
    usages, truth = serve([short, short, short, short, long, long],
                          clock=ManualClock(), advance=[0, 599, 599, 601, 0, 3600 * 23])
    assert [cached(u) for u in usages] == [0, 1408, 1408, 0, 0, 1408]
    assert truth[3]["miss_reason"] == "expired"


def test_openai_knobs_and_switch() -> None:
    scenario = fast(cache={"openai_min_tokens": 256, "openai_step_tokens": 64})
    usages, _ = serve([chat(words(300)), chat(words(300))], scenario)
    assert cached(usages[1]) == 256             # 302 tokens: steps of 64 from 256
    usages, truth = serve([chat(words(1500))] * 2, fast(cache={"enabled": False}))
    assert [cached(u) for u in usages] == [0, 0] and truth[1]["miss_reason"] == "disabled"


def test_cache_fields_absent_when_scenario_turns_them_off() -> None:
    usages, truth = serve([chat(words(1500))] * 2, fast(cache_usage_fields=False))
    assert "prompt_tokens_details" not in usages[1]
    assert truth[1]["read_tokens"] == 1408      # cached all the same


def test_openai_sdk_parses_cached_tokens() -> None:
    messages = [{"role": "system", "content": words(1500)}, {"role": "user", "content": "What now?"}]

    async def scenario_run():
        async with running(Scenario(**FAST_SETTINGS)) as emulator:
            client = openai.AsyncOpenAI(base_url=emulator.base_url + "/v1", api_key="x", max_retries=0)
            cold = await client.chat.completions.create(model="gpt-emu", messages=messages)
            stream = await client.chat.completions.create(model="gpt-emu", messages=messages, stream=True,
                                                          stream_options={"include_usage": True})
            chunks = [chunk async for chunk in stream]
            await client.close()
            return cold.usage, chunks[-1].usage

    cold, warm = run(scenario_run())
    assert cold.prompt_tokens_details.cached_tokens == 0
    assert warm.prompt_tokens_details.cached_tokens == 1408 and warm.prompt_tokens == 1503
