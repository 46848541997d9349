"""Many concurrent streams through an adapter: every request completes, connections are kept
alive and bounded, and TTFT stays near the server's true delay: within a multiple of what a bare
asyncio client adds at the same concurrency, measured just before (tests/support/timing.py).
Client and server share this process here; bench/ measures the overhead properly."""

from __future__ import annotations

import asyncio
import statistics

import pytest

from prober.core.config import TargetConfig
from prober.core.records import ChatRequest
from prober.targets import make_adapter
from prober.targets.conformance import check_exchange
from tests.support.scripted_server import LAST_CHUNK, ScriptedServer, chunk, sse_head
from tests.support.timing import CLIENT_MEDIAN_RATIO, median_allowed, reference_lateness

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(120)]

FIRST_DELAY = 0.05
EVENTS = 10


def _event(content: str) -> bytes:
    return chunk(b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
                 b'"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":null}]}\n\n'
                 % content.encode())


TAIL = chunk(b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
             b'"usage":{"prompt_tokens":3,"completion_tokens":10,"total_tokens":13}}\n\n') \
    + chunk(b"data: [DONE]\n\n") + LAST_CHUNK


@pytest.mark.parametrize("concurrency,total", [(128, 512)])
def test_concurrent_streams(concurrency, total):
    async def handler(request, writer, server):
        writer.write(sse_head())
        await writer.drain()
        await asyncio.sleep(FIRST_DELAY)
        for i in range(EVENTS):
            writer.write(_event(f"w{i} "))
            await writer.drain()
            await asyncio.sleep(0.005)
        writer.write(TAIL)

    async def main():
        reference = await reference_lateness(FIRST_DELAY, total, concurrent=concurrency)
        async with ScriptedServer(handler) as server:
            target = TargetConfig(name="t", protocol="openai", base_url=server.url, model="m",
                                  max_concurrency=concurrency)
            adapter = make_adapter(target, server.url, None)
            request = ChatRequest(messages=[{"role": "user", "content": "x"}])
            queue = list(range(total))
            exchanges = []

            async def worker():
                while queue:
                    queue.pop()
                    exchanges.append(await adapter.send(request))

            await asyncio.gather(*(worker() for _ in range(concurrency)))
            opened = adapter._transport.connections_opened
            await adapter.aclose()
            return exchanges, opened, server, reference

    exchanges, opened, server, reference = asyncio.run(main())
    assert [ex.error_type for ex in exchanges] == [None] * total
    assert all(ex.text == "".join(f"w{i} " for i in range(EVENTS)) for ex in exchanges)
    assert all(len(ex.chunk_ns) == EVENTS and ex.usage["total_tokens"] == 13 for ex in exchanges)
    assert opened == concurrency and server.max_open <= concurrency
    overhead = statistics.median(ex.ttft_ms for ex in exchanges) - FIRST_DELAY * 1000
    print(f"median TTFT {overhead:.1f} ms over the server's delay; a bare client: {reference.client}")
    assert 0 <= overhead <= median_allowed(reference.client, CLIENT_MEDIAN_RATIO), \
        f"median TTFT {overhead:.1f} ms over the server's delay; a bare client: {reference.client}"
    assert not check_exchange(exchanges[0])
