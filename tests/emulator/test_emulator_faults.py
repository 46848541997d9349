"""Each fault does what it says, on the wire and as the SDKs see it; fault draws are reproducible."""

from __future__ import annotations

import itertools
import json

import pytest

from prober.emulator import Faults, Scenario
from tests.support.emulator import RawConnection, anthropic_body, openai_body, raw_request, run, running
from tests.support.timing import assert_on_time, timing_sensitive, untimed_between

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]


def _with(**faults) -> Scenario:
    return Scenario(first_token_delay_ms=2, decode_tokens_per_s=1000, output_tokens=8, faults=Faults(**faults))


async def _raw(scenario: Scenario, path: str, body: dict):
    async with running(scenario) as emulator:
        response = await raw_request(emulator.port, "POST", path, body)
        return response, emulator.ground_truth()


def _deltas(response) -> list[str]:
    return [data for name, data in response.events() if name == "content_block_delta"]


# --- errors before any work ---------------------------------------------------------------------

def test_rate_limit_is_429_with_retry_after_on_both_protocols() -> None:
    scenario = _with(rate_limit=1.0, retry_after_s=7)
    anthropic_response, truth = run(_raw(scenario, "/v1/messages", anthropic_body()))
    assert anthropic_response.status == 429
    assert anthropic_response.headers["retry-after"] == "7"
    body = anthropic_response.json()
    assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"
    assert body["request_id"] == anthropic_response.headers["request-id"] == truth[0]["request_id"]
    assert truth[0]["fault"] == "rate_limit" and truth[0]["status"] == 429 and truth[0]["ttft_ms"] is None

    openai_response, _ = run(_raw(scenario, "/v1/chat/completions", openai_body()))
    assert openai_response.status == 429 and openai_response.headers["retry-after"] == "7"
    error = openai_response.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and set(error) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("fault, anthropic_status, anthropic_type, openai_status", [
    ("overloaded", 529, "overloaded_error", 503),
    ("server_error", 500, "api_error", 500),
])
def test_overloaded_and_server_error_statuses(fault, anthropic_status, anthropic_type, openai_status) -> None:
    scenario = _with(**{fault: 1.0})
    response, truth = run(_raw(scenario, "/v1/messages", anthropic_body()))
    assert response.status == anthropic_status
    assert response.json()["error"]["type"] == anthropic_type
    assert "retry-after" not in response.headers
    assert truth[0]["fault"] == fault
    response, _ = run(_raw(scenario, "/v1/chat/completions", openai_body(stream=False)))
    assert response.status == openai_status
    assert response.json()["error"]["type"] == "server_error"


def test_sdks_raise_their_error_classes() -> None:
    # The SDKs are imported by the three tests that use them: 1.5 s of CPU that collecting this
    # module for its timing tests (`make test-fast` runs those on their own) need not pay.
    import anthropic
    import openai

    async def go(fault: str):
        async with running(_with(**{fault: 1.0})) as emulator:
            a = anthropic.AsyncAnthropic(base_url=emulator.base_url, api_key="x", max_retries=0)
            o = openai.AsyncOpenAI(base_url=emulator.base_url + "/v1", api_key="x", max_retries=0)
            caught = []
            for call in (a.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]),
                         o.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])):
                try:
                    await call
                except Exception as exc:
                    caught.append(exc)
            await a.close()
            await o.close()
            return caught

    limited = run(go("rate_limit"))
    assert isinstance(limited[0], anthropic.RateLimitError) and isinstance(limited[1], openai.RateLimitError)
    assert limited[0].response.headers["retry-after"] == "1"
    overloaded = run(go("overloaded"))
    assert isinstance(overloaded[0], anthropic.OverloadedError)
    assert isinstance(overloaded[1], openai.InternalServerError) and overloaded[1].status_code == 503
    failed = run(go("server_error"))
    assert isinstance(failed[0], anthropic.InternalServerError) and isinstance(failed[1], openai.InternalServerError)


def test_fail_first_n_forces_a_countable_sequence_and_reset_replays_it() -> None:
    scenario = _with(fail_first_n=2, fail_first_kind="rate_limit")

    async def go():
        async with running(scenario) as emulator:
            connection = await RawConnection.open(emulator.port)
            statuses = [(await connection.request("POST", "/v1/messages", anthropic_body())).status
                        for _ in range(3)]
            await connection.request("POST", "/_emulator/reset")
            statuses.append((await connection.request("POST", "/v1/messages", anthropic_body())).status)
            await connection.close()
            return statuses

    assert run(go()) == [429, 429, 200, 429]


def test_fault_draws_are_seeded_per_request() -> None:
    def pattern(seed: int) -> list[str | None]:
        scenario = Scenario(seed=seed, first_token_delay_ms=0, output_tokens=1,
                            faults=Faults(server_error=0.3, rate_limit=0.2))

        async def go():
            async with running(scenario) as emulator:
                connection = await RawConnection.open(emulator.port)
                for _ in range(60):
                    await connection.request("POST", "/v1/chat/completions", openai_body(stream=False))
                await connection.close()
                return [record["fault"] for record in emulator.ground_truth()]
        return run(go())

    first, again, other = pattern(1), pattern(1), pattern(2)
    assert first == again
    assert first != other
    assert 8 <= first.count("server_error") <= 30 and 3 <= first.count("rate_limit") <= 22
    assert first.count(None) + first.count("server_error") + first.count("rate_limit") == 60


# --- faults inside the response -------------------------------------------------------------------

def test_drop_mid_stream_closes_the_connection_after_some_tokens() -> None:
    response, truth = run(_raw(_with(drop_mid_stream=1.0, after_tokens=3), "/v1/messages", anthropic_body()))
    assert response.status == 200 and not response.complete
    assert len(_deltas(response)) == 3
    assert "message_stop" not in [name for name, _ in response.events()]
    assert truth[0]["fault"] == "drop_mid_stream" and truth[0]["tokens_sent"] == 3

    plain, _ = run(_raw(_with(drop_mid_stream=1.0), "/v1/chat/completions", openai_body(stream=False)))
    assert plain.status == 200 and not plain.complete


def test_drop_mid_stream_surfaces_in_the_sdk_as_a_broken_stream() -> None:
    import anthropic

    async def go():
        async with running(_with(drop_mid_stream=1.0, after_tokens=2)) as emulator:
            client = anthropic.AsyncAnthropic(base_url=emulator.base_url, api_key="x", max_retries=0)
            received = []
            with pytest.raises(Exception) as caught:
                async with client.messages.stream(model="m", max_tokens=50,
                                                  messages=[{"role": "user", "content": "x"}]) as stream:
                    async for text in stream.text_stream:
                        received.append(text)
            await client.close()
            return received, caught.value

    received, error = run(go())
    assert len(received) == 2
    assert "incomplete" in repr(error).lower() or "closed" in repr(error).lower()


@pytest.mark.parametrize("then, complete", [("continue", True), ("close", False)])
def test_malformed_sse_sends_a_broken_event(then, complete) -> None:
    scenario = _with(malformed_sse=1.0, after_tokens=2, malformed_then=then)
    response, truth = run(_raw(scenario, "/v1/messages", anthropic_body()))
    assert response.status == 200 and response.complete is complete
    broken = []
    for _, data in response.events():
        try:
            json.loads(data)
        except ValueError:
            broken.append(data)
    assert len(broken) == 1
    assert len(_deltas(response)) == (8 + 1 if complete else 1 + 2)   # the broken one is a delta too
    assert truth[0]["fault"] == "malformed_sse"

    response, _ = run(_raw(scenario, "/v1/chat/completions", openai_body()))
    datas = [data for _, data in response.events()]
    assert sum(1 for data in datas if data != "[DONE]" and not _parses(data)) == 1
    assert (datas[-1] == "[DONE]") is complete


def _parses(data: str) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _gaps_ms(response) -> list[float]:
    arrivals = [ns for ns, payload in response.chunks if b"content_block_delta" in payload]
    assert len(arrivals) == 8
    return [(b - a) / 1e6 for a, b in itertools.pairwise(arrivals)]


@timing_sensitive
def test_stall_pauses_the_stream_then_finishes_it() -> None:
    """The reference is the same stream with no stall, interleaved: its gaps' distance from the
    1 ms decode gap is what the emulator's own pacing costs here, now."""
    async def go():
        async with running(_with(stall=1.0, after_tokens=2, stall_s=0.3)) as stalled, running(_with()) as steady:
            rounds = []
            for _ in range(3):
                timed = await raw_request(stalled.port, "POST", "/v1/messages", anthropic_body())
                rounds.append((timed, await raw_request(steady.port, "POST", "/v1/messages", anthropic_body())))
            return rounds, stalled.ground_truth()

    rounds, truth = run(go())
    off_ms, reference_ms = [], []
    for response, steady in rounds:
        assert response.complete and steady.complete
        gaps_ms = _gaps_ms(response)
        # between the 2nd and 3rd token; a late 2nd token shortens it, so it may be short by as much
        # as a gap may be off
        off_ms += [abs(gaps_ms[1] - 300)] + [abs(gap - 1) for gap in gaps_ms[:1] + gaps_ms[2:]]
        reference_ms += [abs(gap - 1) for gap in _gaps_ms(steady)]
    assert_on_time(off_ms, reference_ms, "the stall and the decode gaps around it")
    assert all(record["fault"] == "stall" and record["tokens_sent"] == 8 for record in truth)


def test_mid_stream_error_after_http_200() -> None:
    scenario = _with(mid_stream_error=1.0, after_tokens=2)
    response, truth = run(_raw(scenario, "/v1/messages", anthropic_body()))
    assert response.status == 200 and response.complete
    events = response.events()
    assert [name for name, _ in events][-1] == "error"
    error = json.loads(events[-1][1])
    assert error["type"] == "error" and error["error"]["type"] == "overloaded_error"
    assert error["request_id"] == response.headers["request-id"]
    assert len(_deltas(response)) == 2 and truth[0]["tokens_sent"] == 2

    response, _ = run(_raw(scenario, "/v1/chat/completions", openai_body()))
    last = json.loads(response.events()[-1][1])
    assert last["error"]["type"] == "server_error"

    plain, truth = run(_raw(scenario, "/v1/messages", anthropic_body(stream=False)))
    assert plain.status == 529 and truth[0]["status"] == 529


def test_sdks_raise_on_mid_stream_errors() -> None:
    import anthropic
    import openai

    async def go():
        async with running(_with(mid_stream_error=1.0, after_tokens=1)) as emulator:
            a = anthropic.AsyncAnthropic(base_url=emulator.base_url, api_key="x", max_retries=0)
            o = openai.AsyncOpenAI(base_url=emulator.base_url + "/v1", api_key="x", max_retries=0)
            with pytest.raises(anthropic.APIStatusError) as anthropic_error:
                async with a.messages.stream(model="m", max_tokens=50,
                                             messages=[{"role": "user", "content": "x"}]) as stream:
                    async for _ in stream.text_stream:
                        pass
            with pytest.raises(openai.APIError) as openai_error:
                stream = await o.chat.completions.create(model="m", stream=True,
                                                         messages=[{"role": "user", "content": "x"}])
                async for _ in stream:
                    pass
            await a.close()
            await o.close()
            return anthropic_error.value, openai_error.value

    anthropic_error, openai_error = run(go())
    assert anthropic_error.body["error"]["type"] == "overloaded_error"
    assert "overloaded" in str(openai_error).lower()


@timing_sensitive
def test_non_streaming_malformed_and_stalled_bodies() -> None:
    malformed, _ = run(_raw(_with(malformed_sse=1.0), "/v1/messages", anthropic_body(stream=False)))
    assert malformed.status == 200 and malformed.complete and not _parses(malformed.body.decode())

    async def go():
        async with running(_with(stall=1.0, stall_s=0.2)) as emulator:
            async def one():
                return await raw_request(emulator.port, "POST", "/v1/messages", anthropic_body(stream=False))
            stalled, reference = await untimed_between(_with(), 1, 8, 0.2, one)
            return stalled[0], emulator.ground_truth(), reference

    stalled, truth, reference = run(go())
    assert stalled.json()["type"] == "message"
    assert truth[0]["ttft_ms"] - truth[0]["scheduled_ttft_ms"] >= 200
    assert_on_time([truth[0]["ttft_ms"] - truth[0]["scheduled_ttft_ms"] - 200], reference.server, "the stalled body")
