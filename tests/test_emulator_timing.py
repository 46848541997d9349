"""Timing: first-token delay, prefill, decode rate, slots and queueing, as configured."""

from __future__ import annotations

import asyncio
import statistics

import pytest

from prober.emulator import Scenario
from prober.emulator.tokenizer import count_tokens
from tests.support.emulator import (RawConnection, anthropic_body, openai_body, raw_request, run, running,
                                    timing_sensitive)

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]


def _first_content_ns(response, marker: bytes) -> int:
    return next(ns for ns, payload in response.chunks if marker in payload)


@timing_sensitive
def test_idle_ttft_matches_configured_delay() -> None:
    scenario = Scenario(first_token_delay_ms=80, prefill_ms_per_token=0.5, output_tokens=4)

    async def go():
        async with running(scenario) as emulator:
            connection = await RawConnection.open(emulator.port)
            responses = []
            for i in range(8):
                body = anthropic_body() if i % 2 else openai_body()
                responses.append(await connection.request("POST", "/v1/messages" if i % 2 else
                                                          "/v1/chat/completions", body))
            await connection.close()
            return responses, emulator.ground_truth()

    responses, truth = run(go())
    expected_ms = 80 + 0.5 * count_tokens("Hello there")
    for response, record in zip(responses, truth):
        assert record["queue_wait_ms"] == 0
        assert record["scheduled_ttft_ms"] == pytest.approx(expected_ms, abs=0.01)
        assert expected_ms <= record["ttft_ms"] < expected_ms + 3
        # a cheap client sees the same first token within a couple of milliseconds
        marker = b"content_block_delta" if record["protocol"] == "anthropic" else b'"delta":{"content"'
        client_ttft_ms = (_first_content_ns(response, marker) - response.sent_ns) / 1e6
        assert record["ttft_ms"] <= client_ttft_ms < record["ttft_ms"] + 3


@timing_sensitive
def test_headers_and_preamble_come_before_prefill() -> None:
    """Time to first byte shows the queue; time to first token adds delay and prefill."""
    async def go():
        async with running(Scenario(first_token_delay_ms=100, output_tokens=2)) as emulator:
            return await raw_request(emulator.port, "POST", "/v1/messages", anthropic_body())

    response = run(go())
    first_chunk_ms = (response.chunks[0][0] - response.sent_ns) / 1e6
    assert b"message_start" in response.chunks[0][1]
    assert first_chunk_ms < 20
    assert (_first_content_ns(response, b"content_block_delta") - response.sent_ns) / 1e6 >= 100


@timing_sensitive
def test_prefill_scales_with_input_tokens() -> None:
    long_prompt = "word " * 4000
    scenario = Scenario(first_token_delay_ms=10, prefill_ms_per_token=0.025, output_tokens=2)

    async def go():
        async with running(scenario) as emulator:
            await raw_request(emulator.port, "POST", "/v1/messages", anthropic_body(long_prompt))
            return emulator.ground_truth()[0]

    record = run(go())
    assert record["input_tokens"] == 4000
    assert record["scheduled_ttft_ms"] == pytest.approx(10 + 100, abs=0.01)
    assert 110 <= record["ttft_ms"] < 113


@timing_sensitive
def test_decode_rate_sets_the_gaps_and_does_not_drift() -> None:
    scenario = Scenario(first_token_delay_ms=5, decode_tokens_per_s=250, output_tokens=100)

    async def go():
        async with running(scenario) as emulator:
            return await raw_request(emulator.port, "POST", "/v1/messages", anthropic_body())

    response = run(go())
    arrivals = [ns for ns, payload in response.chunks if b"content_block_delta" in payload]
    assert len(arrivals) == 100
    gaps_ms = [(b - a) / 1e6 for a, b in zip(arrivals, arrivals[1:])]
    assert statistics.median(gaps_ms) == pytest.approx(4.0, abs=0.5)
    # absolute deadlines: 99 gaps add up to 99 x 4 ms, not 99 x (4 ms + overhead)
    assert (arrivals[-1] - arrivals[0]) / 1e6 == pytest.approx(396, abs=4)


@timing_sensitive
def test_requests_beyond_the_slots_queue_fifo_for_one_service_time() -> None:
    # service time: 40 ms delay + 5 gaps of 10 ms = 90 ms (prefill of a 2-token prompt is negligible)
    scenario = Scenario(slots=2, first_token_delay_ms=40, prefill_ms_per_token=0, decode_tokens_per_s=100,
                        output_tokens=6)

    async def go():
        async with running(scenario) as emulator:
            async def one(i: int):
                await asyncio.sleep(i * 0.002)   # arrive in a known order
                return await raw_request(emulator.port, "POST", "/v1/messages", anthropic_body(f"prompt {i}"))
            responses = await asyncio.gather(*(one(i) for i in range(4)))
            return responses, emulator.ground_truth()

    responses, truth = run(go())
    assert all(response.complete for response in responses)
    by_arrival = sorted(truth, key=lambda record: record["arrived_mono_ns"])
    waits = [record["queue_wait_ms"] for record in by_arrival]
    assert waits[:2] == [0, 0]
    # the third and fourth wait for the first and second to finish (FIFO)
    first_done = [(r["arrived_mono_ns"] + (r["queue_wait_ms"] + 90) * 1e6) for r in by_arrival[:2]]
    for waiter, done_ns in zip(by_arrival[2:], first_done):
        assert waiter["queue_wait_ms"] == pytest.approx((done_ns - waiter["arrived_mono_ns"]) / 1e6, abs=1)
        assert 80 < waiter["queue_wait_ms"] < 92
        assert waiter["ttft_ms"] == pytest.approx(waiter["queue_wait_ms"] + 40, abs=3)
    assert [r["in_flight_at_arrival"] for r in by_arrival] == [0, 1, 2, 3]


@timing_sensitive
def test_non_streaming_answers_when_the_last_token_is_due() -> None:
    scenario = Scenario(first_token_delay_ms=20, prefill_ms_per_token=0, decode_tokens_per_s=100, output_tokens=11)

    async def go():
        async with running(scenario) as emulator:
            response = await raw_request(emulator.port, "POST", "/v1/chat/completions", openai_body(stream=False))
            return response, emulator.ground_truth()[0]

    response, record = run(go())
    assert response.status == 200
    assert record["scheduled_ttft_ms"] == pytest.approx(20 + 100, abs=0.01)
    assert 120 <= record["ttft_ms"] < 123
