"""Connection handling: clients that leave, a server that stops mid-stream, bad HTTP."""

from __future__ import annotations

import asyncio

import pytest

from prober.emulator import Emulator, Scenario
from tests.support.emulator import RawConnection, anthropic_body, raw_request, run, running

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]


def test_a_client_that_leaves_mid_stream_frees_its_slot() -> None:
    scenario = Scenario(slots=1, first_token_delay_ms=5, decode_tokens_per_s=100, output_tokens=200)

    async def go():
        async with running(scenario) as emulator:
            reader, writer = await asyncio.open_connection("127.0.0.1", emulator.port)
            body = b'{"model":"m","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"hi"}]}'
            writer.write(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            await reader.readuntil(b"content_block_delta")
            writer.close()                         # leaves with ~2 s of answer still to come
            second = await raw_request(emulator.port, "POST", "/v1/messages",
                                       anthropic_body(max_tokens=2))
            return second, emulator.ground_truth()

    second, truth = run(go())
    assert second.status == 200 and second.complete
    left, waited = truth
    assert left["client_disconnected"] and 0 < left["tokens_sent"] < 200
    # kept to the end, the slot would have held the second request for the rest of the first's answer
    held_ms = (200 - left["tokens_sent"]) * 1000 / 100
    assert waited["queue_wait_ms"] < 0.25 * held_ms, (waited["queue_wait_ms"], held_ms)


def test_stop_ends_streams_queued_requests_and_idle_connections() -> None:
    async def go():
        emulator = Emulator(Scenario(slots=1, first_token_delay_ms=5, decode_tokens_per_s=50, output_tokens=500))
        port = await emulator.start()
        idle = await RawConnection.open(port)
        await idle.request("GET", "/v1/models")
        streams = [asyncio.create_task(raw_request(port, "POST", "/v1/messages", anthropic_body())) for _ in range(3)]
        await asyncio.sleep(0.2)
        await asyncio.wait_for(emulator.stop(), timeout=5)
        outcomes = await asyncio.wait_for(asyncio.gather(*streams, return_exceptions=True), timeout=5)
        await idle.close()
        return outcomes

    outcomes = run(go())
    cut_off = [o for o in outcomes if not isinstance(o, Exception) and o.status == 200 and not o.complete]
    unanswered = [o for o in outcomes if isinstance(o, asyncio.IncompleteReadError)]
    assert len(cut_off) == 1 and len(unanswered) == 2     # the one in service, the two queued


@pytest.mark.parametrize("raw, status", [
    (b"NONSENSE\r\n\r\n", 400),
    (b"POST /v1/messages HTTP/1.1\r\ncontent-length: nope\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nx-big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
])
def test_unreadable_http_gets_an_error_and_a_close(raw, status) -> None:
    async def go():
        async with running() as emulator:
            reader, writer = await asyncio.open_connection("127.0.0.1", emulator.port)
            writer.write(raw)
            data = await reader.read()              # until the server closes
            writer.close()
            return data

    data = run(go())
    assert data.startswith(b"HTTP/1.1 %d " % status)
    assert b"connection: close" in data
