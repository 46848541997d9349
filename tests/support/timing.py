"""Timing tests: one visible retry, and the reference a timing bound is measured against.

The 2-core machine is shared with the client under test and with whatever else runs, so a timing
bound is not a fixed number of milliseconds fitted to one machine: each test also measures, in
turns with the timed requests, the same emulator answering with the timed feature off (its own
work) and a bare asyncio sleep as long as the timed one (what waking costs under the present
load), and bounds the emulator's lateness by a multiple of that plus a small measured margin.
"""

from __future__ import annotations

import asyncio
import functools
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from prober.emulator import Emulator, Scenario
from tests.support.emulator import RawResponse, anthropic_body, openai_body, raw_request, running

# One retry at most, and never a silent one: each failed attempt is printed in the test's output
# and listed in the terminal summary (tests/conftest.py), with its figures.
TIMING_ATTEMPTS = 2

# The failed attempts of the test running in this process: tests/conftest.py moves them onto the
# test's report, so that they reach the terminal summary from a pytest-xdist worker too.
_retries: list[tuple[str, int, str]] = []   # (test id, failed attempt, its assertion message)


def timing_sensitive(test):
    """Run a timing test again if it failed, up to TIMING_ATTEMPTS runs in all, reporting each
    failed attempt. One burst of outside load can make one run late; a real timing bug fails every
    run, and the bounds stay tight. Also marks the test `timing`: `make test-fast` runs those on
    their own, after the others, since a test beside them on the other core is load they would
    have to absorb."""
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
    return pytest.mark.timing(wrapper)


def take_retries() -> list[tuple[str, int, str]]:
    """The failed attempts recorded since the last call, forgotten here once taken."""
    taken = list(_retries)
    _retries.clear()
    return taken


def retry_summary_lines(retries: list[tuple[str, int, str]]) -> list[str]:
    return [f"{test_id}: attempt {attempt} failed: {message}" for test_id, attempt, message in retries]


# A timing may be this many times as late as its reference, plus MARGIN_MS. The reference of an
# emulator timing is the same emulator answering the same request with the timed feature off (no
# first-token delay, no stall, no pacing), measured interleaved in the same test: it does the same
# parsing, planning and encoding, so only the scheduling differs; plus, where the timed request
# sleeps, a bare asyncio sleep as long (waking is what outside load delays most, and an untimed
# request never sleeps). The ratio only has to absorb load moving between the measurements.
MEDIAN_RATIO = 3
WORST_RATIO = 4
MEDIAN_OF = 4
# A client's timing has no emulator twin: its reference is a bare asyncio client, which does a
# fraction of the work of the prober's adapter (httpx, SSE parsing, records). Measured here (1
# December 2026, load 6 to 8), the adapter's median lateness was 1.3 to 9.4 times a bare client's.
CLIENT_MEDIAN_RATIO = 10
# The absolute margin covers what a ratio of two small numbers cannot. Measured here (1 December
# 2026): quiet (load 1 to 3), the references' worst drops to 0.2 to 0.4 ms while one timed event
# still lands 1 to 2 ms late (a scheduler tick, a page fault; the stall test's gaps up to 1.7 ms,
# a non-streaming answer 5.6 ms once at load 6); under two busy loops (load 5 to 7), a sleeping
# request woke 5 to 13 ms late at times when the reference's eight did not. On the other 2-core
# machine the 512-stream test's figures (p50 3.1 ms, p99 10.0 ms) are carried by its ratio to
# the untimed twin, not by the margin. 5 ms covers the quiet tick with room and most of one lost
# timeslice under load (the one visible retry covers the rest), and stays well under the
# regressions these tests exist for: a 30 ms delay per frame, the loop blocked 1 ms per frame.
MARGIN_MS = 5.0


@dataclass(frozen=True)
class Lateness:
    """How late something happened after it was due, in ms, over a number of events."""
    median_ms: float
    worst_ms: float
    count: int

    @classmethod
    def of(cls, lateness_ms: list[float]) -> Lateness:
        return cls(statistics.median(lateness_ms), max(lateness_ms), len(lateness_ms))

    def plus(self, other: Lateness) -> Lateness:
        """Two costs one event pays in turn: their medians and their worsts added."""
        return Lateness(self.median_ms + other.median_ms, self.worst_ms + other.worst_ms,
                        min(self.count, other.count))

    def __str__(self) -> str:
        return f"median {self.median_ms:.2f} ms, worst {self.worst_ms:.2f} ms over {self.count}"


@dataclass(frozen=True)
class Reference:
    """The bare reference's lateness, as its server saw it (the write after the sleep) and as its
    client saw it (the byte's arrival after send plus the delay)."""
    server: Lateness
    client: Lateness

    @classmethod
    def of(cls, server_ms: list[float], client_ms: list[float]) -> Reference:
        return cls(Lateness.of(server_ms), Lateness.of(client_ms))


def median_allowed(reference: Lateness, ratio: float = MEDIAN_RATIO) -> float:
    return ratio * reference.median_ms + MARGIN_MS


def assert_on_time(lateness_ms: list[float], reference: Lateness | list[float], what: str, *,
                   median_ratio: float = MEDIAN_RATIO, worst_ratio: float = WORST_RATIO) -> None:
    """`what` was late by no more than `median_ratio` times the reference's median plus MARGIN_MS
    (a median of at least MEDIAN_OF events: one event's lateness is a draw, not a median), and at
    worst by no more than `worst_ratio` times the reference's worst plus MARGIN_MS."""
    measured = Lateness.of(lateness_ms)
    if not isinstance(reference, Lateness):
        reference = Lateness.of(reference)
    print(f"{what}: late by {measured}; reference: {reference}")
    median_holds = measured.count < MEDIAN_OF or measured.median_ms <= median_allowed(reference, median_ratio)
    assert median_holds and measured.worst_ms <= worst_ratio * reference.worst_ms + MARGIN_MS, (
        f"{what} late by {measured}; its reference measured in this test: {reference} "
        f"(allowed: {median_ratio}x its median, {worst_ratio}x its worst, each + {MARGIN_MS} ms)")


FIRST_CONTENT = {"anthropic": b"content_block_delta", "openai": b'"delta":{"content"'}


def first_content_ns(response: RawResponse, protocol: str) -> int:
    return next(ns for ns, payload in response.chunks if FIRST_CONTENT[protocol] in payload)


async def emulator_lateness(emulator: Emulator, requests: int) -> tuple[list[float], list[float]]:
    """`requests` streamed requests, one at a time and alternating protocols, to a running emulator
    (the test's scenario with its timed feature off): how late each first token was by its ground
    truth (server) and how long after that the client read it (client), in ms. The emulator's own
    work per request, on this machine, under its present load: the reference of its timed runs."""
    responses = []
    for i in range(requests):
        path, body = ("/v1/messages", anthropic_body()) if i % 2 else ("/v1/chat/completions", openai_body())
        responses.append(await raw_request(emulator.port, "POST", path, body))
    truth = emulator.ground_truth()[-requests:]
    server = [record["ttft_ms"] - record["scheduled_ttft_ms"] for record in truth]
    client = [(first_content_ns(response, record["protocol"]) - response.sent_ns) / 1e6 - record["ttft_ms"]
              for response, record in zip(responses, truth)]
    return server, client


async def untimed_between(untimed: Scenario, rounds: int, per_round: int, sleep_s: float,
                          timed_round: Callable[[], Awaitable[Any]]) -> tuple[list[Any], Reference]:
    """`rounds` of the test's timed requests, each followed by `per_round` requests to an emulator
    running `untimed` (the test's scenario with its timed feature off) and as many bare asyncio
    sleeps of `sleep_s` (the timed requests' wait), so that the reference sees the same load as the
    measurement, moment by moment. Returns the rounds' results and the reference: the emulator's own
    work plus what waking from a sleep costs here now (an untimed request never sleeps, and on a
    loaded machine the wake-up is most of a timed request's lateness)."""
    results: list[Any] = []
    server: list[float] = []
    client: list[float] = []
    bare_server: list[float] = []
    bare_client: list[float] = []
    async with running(untimed) as emulator:
        for _ in range(rounds):
            results.append(await timed_round())
            late_server, late_client = await emulator_lateness(emulator, per_round)
            server += late_server
            client += late_client
            bare = await bare_lateness(sleep_s, per_round)
            bare_server += bare[0]
            bare_client += bare[1]
    # The emulator's own work must itself be small, or a delay added to every frame (untimed ones
    # too) would pass as its own work: held to a bare stream as a timed request is to it.
    assert_on_time(server, bare_server, "the emulator's first tokens with the timed feature off")
    return results, Reference(Lateness.of(server).plus(Lateness.of(bare_server)),
                              Lateness.of(client).plus(Lateness.of(bare_client)))


class BareServer:
    """A stream with nothing of the emulator in it: read a request head, sleep until `delay_s`
    after it arrived, write one byte, close; record how late the write was."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
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
        await reader.readuntil(b"\r\n\r\n")
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


async def bare_lateness(delay_s: float, requests: int, concurrent: int = 1) -> tuple[list[float], list[float]]:
    """`requests` bare streams of `delay_s`, `concurrent` at a time, on this event loop: what the
    loop, the loopback socket and this machine's present load cost a stream, with no emulator;
    (server, client) lateness in ms."""
    client: list[float] = []
    async with BareServer(delay_s) as server:
        for _ in range(max(1, requests // concurrent)):
            client += await asyncio.gather(*(bare_request(server.port, delay_s) for _ in range(concurrent)))
    return server.lateness_ms, client


async def reference_lateness(delay_s: float, requests: int, concurrent: int = 1) -> Reference:
    return Reference.of(*await bare_lateness(delay_s, requests, concurrent))
