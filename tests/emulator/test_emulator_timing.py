"""Timing: first-token delay, prefill, decode rate, slots and queueing, as configured.

Lateness is bounded against the same emulator answering with the timed feature off (no delay, no
prefill), measured interleaved in the same test (tests/support/timing.py), not against a number of
milliseconds fitted to one machine."""

from __future__ import annotations

import asyncio
import statistics

import pytest

from prober.emulator import Scenario
from prober.emulator.tokenizer import count_tokens
from tests.support.emulator import RawConnection, anthropic_body, openai_body, raw_request, run, running
from tests.support.timing import Lateness, assert_on_time, first_content_ns, timing_sensitive, untimed_between

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]

UNTIMED = Scenario(first_token_delay_ms=0, prefill_ms_per_token=0, output_tokens=4)


@timing_sensitive
def test_idle_ttft_matches_configured_delay() -> None:
    scenario = Scenario(first_token_delay_ms=80, prefill_ms_per_token=0.5, output_tokens=4)

    expected_ms = 80 + 0.5 * count_tokens("Hello there")

    async def go():
        async with running(scenario) as emulator:
            connection = await RawConnection.open(emulator.port)

            async def two():
                return [await connection.request("POST", "/v1/chat/completions", openai_body()),
                        await connection.request("POST", "/v1/messages", anthropic_body())]
            pairs, reference = await untimed_between(UNTIMED, 4, 2, expected_ms / 1e3, two)
            await connection.close()
            return [response for pair in pairs for response in pair], emulator.ground_truth(), reference

    responses, truth, reference = run(go())
    transfer_ms = []
    for response, record in zip(responses, truth):
        assert record["queue_wait_ms"] == 0
        assert record["scheduled_ttft_ms"] == pytest.approx(expected_ms, abs=0.01)
        assert expected_ms <= record["ttft_ms"]
        # a cheap client sees the same first token as soon as a bare stream's client would
        client_ttft_ms = (first_content_ns(response, record["protocol"]) - response.sent_ns) / 1e6
        assert record["ttft_ms"] <= client_ttft_ms
        transfer_ms.append(client_ttft_ms - record["ttft_ms"])
    assert_on_time([record["ttft_ms"] - expected_ms for record in truth], reference.server, "the emulator's TTFT")
    assert_on_time(transfer_ms, reference.client, "the client's first token after the emulator wrote it")


@timing_sensitive
def test_headers_and_preamble_come_before_prefill() -> None:
    """Time to first byte shows the queue; time to first token adds delay and prefill."""
    async def go():
        async with running(Scenario(first_token_delay_ms=100, output_tokens=2)) as emulator:
            return await raw_request(emulator.port, "POST", "/v1/messages", anthropic_body())

    response = run(go())
    first_chunk_ms = (response.chunks[0][0] - response.sent_ns) / 1e6
    first_token_ms = (first_content_ns(response, "anthropic") - response.sent_ns) / 1e6
    assert b"message_start" in response.chunks[0][1]
    assert first_token_ms >= 100
    # Sent before the delay began, the preamble is in within its first half on any machine that can
    # keep the delay itself; held back until the first token, it would arrive with it.
    assert first_chunk_ms < 0.5 * first_token_ms, (first_chunk_ms, first_token_ms)
    assert (first_content_ns(response, "anthropic") - response.sent_ns) / 1e6 >= 100


@timing_sensitive
def test_prefill_scales_with_input_tokens() -> None:
    """The reference is the same 4000-token request to an emulator whose fixed delay alone makes up
    the 110 ms: it parses and counts the same prompt, so only the prefill's scheduling differs."""
    long_prompt = "word " * 4000
    prefilling = Scenario(first_token_delay_ms=10, prefill_ms_per_token=0.025, output_tokens=2)
    fixed = Scenario(first_token_delay_ms=110, prefill_ms_per_token=0, output_tokens=2)

    async def lateness(scenario: Scenario) -> tuple[dict, float]:
        async with running(scenario) as emulator:
            await raw_request(emulator.port, "POST", "/v1/messages", anthropic_body(long_prompt))
            record = emulator.ground_truth()[0]
            return record, record["ttft_ms"] - record["scheduled_ttft_ms"]

    async def go():
        records, prefill_late, fixed_late = [], [], []
        for _ in range(4):      # interleaved, so that both see the same load
            record, late = await lateness(prefilling)
            records.append(record)
            prefill_late.append(late)
            fixed_late.append((await lateness(fixed))[1])
        return records, prefill_late, Lateness.of(fixed_late)

    records, prefill_late, reference = run(go())
    for record in records:
        assert record["input_tokens"] == 4000
        assert record["scheduled_ttft_ms"] == pytest.approx(10 + 100, abs=0.01)
        assert record["ttft_ms"] >= 110
    assert_on_time(prefill_late, reference, "the TTFT after a 4000-token prefill")


@timing_sensitive
def test_decode_rate_sets_the_gaps_and_does_not_drift() -> None:
    scenario = Scenario(first_token_delay_ms=5, decode_tokens_per_s=250, output_tokens=100)

    async def go():
        async with running(scenario) as emulator:
            async def one():
                return await raw_request(emulator.port, "POST", "/v1/messages", anthropic_body())
            responses, reference = await untimed_between(UNTIMED, 2, 8, 0.004, one)
            return responses[-1], reference

    response, reference = run(go())
    arrivals = [ns for ns, payload in response.chunks if b"content_block_delta" in payload]
    assert len(arrivals) == 100
    # absolute deadlines: token k arrives k x 4 ms after the stream's start, not k x (4 ms + overhead);
    # the start is the median of the arrivals' implied starts, so that one late token (the first
    # too) is one token off schedule, and drift puts the early and the late tokens far off it
    starts_ms = [ns / 1e6 - 4 * k for k, ns in enumerate(arrivals)]
    start_ms = statistics.median(starts_ms)
    off_schedule_ms = [abs(implied - start_ms) for implied in starts_ms]
    assert_on_time(off_schedule_ms, reference.server, "tokens against a 4 ms decode schedule")


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

            async def four():
                return await asyncio.gather(*(one(i) for i in range(4)))
            rounds, reference = await untimed_between(UNTIMED, 1, 8, 0.04, four)
            return rounds[0], emulator.ground_truth(), reference

    responses, truth, reference = run(go())
    assert all(response.complete for response in responses)
    by_arrival = sorted(truth, key=lambda record: record["arrived_mono_ns"])
    waits = [record["queue_wait_ms"] for record in by_arrival]
    assert waits[:2] == [0, 0]
    # the third and fourth wait for the first and second to finish (FIFO)
    first_done = [(r["arrived_mono_ns"] + (r["queue_wait_ms"] + 90) * 1e6) for r in by_arrival[:2]]
    late_ms = []
    for waiter, done_ns in zip(by_arrival[2:], first_done):
        # a waiter starts when its slot's first holder is due to finish, and 40 ms later its first token
        late_ms.append(abs(waiter["queue_wait_ms"] - (done_ns - waiter["arrived_mono_ns"]) / 1e6))
        assert waiter["queue_wait_ms"] > 0
        late_ms.append(abs(waiter["ttft_ms"] - (waiter["queue_wait_ms"] + 40)))
    assert_on_time(late_ms, reference.server, "queued requests' start and first token")
    assert [r["in_flight_at_arrival"] for r in by_arrival] == [0, 1, 2, 3]


@timing_sensitive
def test_non_streaming_answers_when_the_last_token_is_due() -> None:
    scenario = Scenario(first_token_delay_ms=20, prefill_ms_per_token=0, decode_tokens_per_s=100, output_tokens=11)

    async def go():
        async with running(scenario) as emulator:
            async def one():
                return await raw_request(emulator.port, "POST", "/v1/chat/completions", openai_body(stream=False))
            responses, reference = await untimed_between(UNTIMED, 1, 8, 0.12, one)
            return responses[0], emulator.ground_truth()[0], reference

    response, record, reference = run(go())
    assert response.status == 200
    assert record["scheduled_ttft_ms"] == pytest.approx(20 + 100, abs=0.01)
    assert record["ttft_ms"] >= 120
    assert_on_time([record["ttft_ms"] - 120], reference.server, "the non-streaming answer")
