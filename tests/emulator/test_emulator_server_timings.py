"""The emulator's llama-server-style `timings` (scenario `server_timings`), held against responses
recorded from llama-server: the same keys, on the same chunk, and the values the scenario planned."""

from __future__ import annotations

import json

import pytest

from prober.emulator import Scenario
from tests.support.emulator import openai_body, raw_request, run, running, sse_events
from tests.targets.test_targets_samples import http_body

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]

TIMED = Scenario(first_token_delay_ms=4, prefill_ms_per_token=0.25, decode_tokens_per_s=1000, output_tokens=5,
                 server_timings=True)


def _chunks(body: bytes) -> list[dict]:
    return [json.loads(data) for _, data in sse_events(body) if data != "[DONE]"]


def _timed(chunks: list[dict]) -> list[int]:
    return [i for i, chunk in enumerate(chunks) if "timings" in chunk]


async def _post(body: dict, scenario: Scenario = TIMED):
    async with running(scenario) as emulator:
        return await raw_request(emulator.port, "POST", "/v1/chat/completions", body)


@pytest.mark.parametrize("recorded, include_usage", [("openai-stream.http", False),
                                                     ("openai-stream-include-usage.http", True)])
def test_timings_ride_on_the_last_chunk_as_llama_server_puts_them(recorded, include_usage):
    llama = _chunks(http_body(recorded)[1])
    ours = _chunks(run(_post(openai_body(include_usage=include_usage, max_tokens=3))).body)
    assert _timed(llama) == [len(llama) - 1] and _timed(ours) == [len(ours) - 1]
    assert set(ours[-1]["timings"]) == set(llama[-1]["timings"])
    assert ("usage" in ours[-1]) == ("usage" in llama[-1]) == include_usage


def test_timings_report_the_planned_prefill_and_decode():
    response = run(_post(openai_body(stream=False, max_tokens=4)))
    timings = response.json()["timings"]
    assert set(timings) == set(json.loads(http_body("openai-nonstream.http")[1])["timings"])
    prompt_tokens = response.json()["usage"]["prompt_tokens"]
    assert timings["prompt_n"] == prompt_tokens and timings["cache_n"] == 0
    assert timings["prompt_ms"] == pytest.approx(4 + 0.25 * prompt_tokens)
    assert timings["predicted_n"] == 4 and timings["predicted_ms"] == pytest.approx(3 * 1.0)


def test_without_the_switch_there_are_no_timings_as_on_hosted_openai():
    chunks = _chunks(run(_post(openai_body(max_tokens=3), Scenario(first_token_delay_ms=1))).body)
    assert _timed(chunks) == []
