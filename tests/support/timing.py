"""Timing tests: one visible retry, and the reference a timing bound is measured against.

The 2-core machine is shared with the client under test and with whatever else runs, so a timing
bound is not a fixed number of milliseconds fitted to one machine: each test also measures how late
a bare asyncio stream (BareServer: a sleep and a write, none of the emulator) runs on this machine
now, just before or at the same moment, and bounds the emulator's lateness by a multiple of that.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

# One retry at most, and never a silent one: each failed attempt is printed in the test's output
# and listed in the terminal summary (tests/conftest.py), with its figures.
TIMING_ATTEMPTS = 2

_retries: list[tuple[str, int, str]] = []   # (test id, failed attempt, its assertion message)


def timing_sensitive(test):
    """Run a timing test again if it failed, up to TIMING_ATTEMPTS runs in all, reporting each
    failed attempt. One burst of outside load can make one run late; a real timing bug fails every
    run, and the bounds stay tight."""
    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for attempt in range(1, TIMING_ATTEMPTS + 1):
            try:
                return test(*args, **kwargs)
            except AssertionError as failure:
                if attempt == TIMING_ATTEMPTS:
                    raise
                test_id = os.environ.get("PYTEST_CURRENT_TEST", test.__name__).rsplit(" (", 1)[0]
                message = " ".join(str(failure).split())[:400]
                _retries.append((test_id, attempt, message))
                print(f"timing retry: attempt {attempt} of {TIMING_ATTEMPTS} failed, running again: {message}",
                      file=sys.stderr)
    return wrapper


def retry_summary_lines() -> list[str]:
    return [f"{test_id}: attempt {attempt} failed: {message}" for test_id, attempt, message in _retries]


# An emulator timing may be this many times as late as the bare reference measured in the same test:
# the emulator does more per stream than the reference (parse, plan, tokenize, encode), and on a
# shared 2-core machine the load moves between two measurements. Measured here (1 December 2026,
# load average 6 to 8 from other test runs): 512 concurrent streams to each at the same moment,
# the emulator's median lateness was 1.3 to 9.4 times the reference's, its worst 0.8 to 2.0 times.
MEDIAN_RATIO = 10
WORST_RATIO = 4
MEDIAN_OF = 4


@dataclass(frozen=True)
class Lateness:
    """How late something happened after it was due, in ms, over a number of events."""
    median_ms: float
    worst_ms: float
    count: int

    @classmethod
    def of(cls, lateness_ms: list[float]) -> Lateness:
        return cls(statistics.median(lateness_ms), max(lateness_ms), len(lateness_ms))

    def __str__(self) -> str:
        return f"median {self.median_ms:.2f} ms, worst {self.worst_ms:.2f} ms over {self.count}"


@dataclass(frozen=True)
class Reference:
    """The bare reference's lateness, as its server saw it (the write after the sleep) and as its
    client saw it (the byte's arrival after send plus the delay)."""
    server: Lateness
    client: Lateness


def assert_on_time(lateness_ms: list[float], reference: Lateness, what: str) -> None:
    """`what` was late by no more than MEDIAN_RATIO times the reference's median (a median of at
    least MEDIAN_OF events: one event's lateness is a draw, not a median), and at worst by no more
    than WORST_RATIO times the reference's worst."""
    measured = Lateness.of(lateness_ms)
    print(f"{what}: late by {measured}; bare reference: {reference}")
    median_holds = measured.count < MEDIAN_OF or measured.median_ms <= MEDIAN_RATIO * reference.median_ms
    assert median_holds and measured.worst_ms <= WORST_RATIO * reference.worst_ms, (
        f"{what} late by {measured}; a bare asyncio stream measured in this test: {reference} "
        f"(allowed: {MEDIAN_RATIO}x its median, {WORST_RATIO}x its worst)")


_LATENESS_PATH = b"GET /lateness "


class BareServer:
    """The shape of an emulator stream with nothing of the emulator in it: read a request head,
    sleep until `delay_s` after it arrived, write one byte, close; record how late the write was.
    With `events`, it is an HTTP/1.1 stream instead, doing the kind of work a stream costs: parse
    the JSON body, send chunked headers, then `events` JSON events `gap_s` apart from the first,
    which is due `delay_s` after arrival (the one whose lateness is recorded).
    `GET /lateness` answers the lateness recorded since the last such request, as JSON (for a
    server in another process)."""

    def __init__(self, delay_s: float, events: int = 0, gap_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.events = events
        self.gap_s = gap_s
        self.lateness_ms: list[float] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> BareServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        head = await reader.readuntil(b"\r\n\r\n")
        if head.startswith(_LATENESS_PATH):
            body = json.dumps(self.lateness_ms).encode()
            self.lateness_ms = []
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        elif self.events:
            due = loop.time() + self.delay_s
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            request = json.loads(await reader.readexactly(length))
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n")
            for index in range(self.events):
                await asyncio.sleep(due + index * self.gap_s - loop.time())
                payload = {"index": index, "model": request["model"], "text": "word"}
                event = b"data: %s\n\n" % json.dumps(payload).encode()
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                if index == 0:
                    self.lateness_ms.append((loop.time() - due) * 1e3)
            writer.write(b"0\r\n\r\n")
        else:
            due = loop.time() + self.delay_s
            await asyncio.sleep(due - loop.time())
            writer.write(b"x")
            self.lateness_ms.append((loop.time() - due) * 1e3)
        await writer.drain()
        writer.close()


async def bare_request(port: int, delay_s: float) -> float:
    """One request to a BareServer; the client-side lateness of its byte, in ms."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = time.perf_counter()
    writer.write(b"GET / HTTP/1.1\r\n\r\n")
    await reader.readexactly(1)
    lateness_ms = (time.perf_counter() - sent - delay_s) * 1e3
    writer.close()
    return lateness_ms


async def reference_lateness(delay_s: float, requests: int, concurrent: int = 1) -> Reference:
    """`requests` bare streams of `delay_s`, `concurrent` at a time, on this event loop: what the
    loop, the loopback socket and this machine's present load cost a stream, with no emulator."""
    client: list[float] = []
    async with BareServer(delay_s) as server:
        for _ in range(max(1, requests // concurrent)):
            client += await asyncio.gather(*(bare_request(server.port, delay_s) for _ in range(concurrent)))
    return Reference(Lateness.of(server.lateness_ms), Lateness.of(client))


def serve_bare(delay_s: float, events: int = 0, gap_s: float = 0.0) -> None:
    """Run a BareServer in this process until killed, printing its port first (for a reference
    measured against a server in its own process, as `prober emulate` runs)."""
    async def main() -> None:
        async with BareServer(delay_s, events, gap_s) as server:
            print(f"bare server on port {server.port}", flush=True)
            await asyncio.Event().wait()
    asyncio.run(main())
