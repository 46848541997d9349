"""`HTTPTransport.send(not_before_ns=...)`: a request prepared ahead is written by a loop timer
when due, never before, on asyncio's loop and on uvloop (whose timers fire up to a millisecond
early). The server that checks it stamps each request in a thread of its own, on the same
monotonic clock, so its stamps do not wait for the event loop under test."""

from __future__ import annotations

import asyncio
import socket
import threading
from time import perf_counter_ns

import pytest

from prober.core.config import Timeouts
from prober.targets.transport import HTTPTransport, TransportError, build_head, split_url
from tests.support.scripted_server import ScriptedServer, response_bytes

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]


class _StampingServer:
    """Answers every request with "ok", noting (its body, perf_counter_ns when its first bytes
    were read) from a thread per connection."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[bytes, int]] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        buf = b""
        with sock:
            while True:
                data = sock.recv(65536)
                if not data:
                    return
                if not buf:
                    first_ns = perf_counter_ns()
                buf += data
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    continue
                length = int(buf[:end].lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(buf) < end + 4 + length:
                    continue
                self.arrivals.append((buf[end + 4:end + 4 + length], first_ns))
                buf = buf[end + 4 + length:]
                sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    def close(self) -> None:
        self._listener.close()


def _transport(url: str) -> tuple[HTTPTransport, bytes]:
    origin, _ = split_url(url)
    transport = HTTPTransport(origin, max_connections=64, timeouts=Timeouts(connect=5, read=10, total=20))
    return transport, build_head("POST", "/v1/x", origin, {"content-type": "application/json"})


def test_prepared_requests_reach_the_server_when_due_never_before(run_on):
    server = _StampingServer()
    count = 24

    async def main():
        transport, head = _transport(server.url)
        t0 = perf_counter_ns()
        # All prepared at once, on new connections and reused ones alike, due 20-135 ms later.
        due = {b"%d" % i: t0 + 20_000_000 + (i // 2) * 10_000_000 for i in range(count)}

        async def one(body: bytes):
            response = await transport.send(head, body, not_before_ns=due[body])
            try:
                assert await response.read() == b"ok"
            finally:
                await response.aclose()
            return body, response.start_ns

        started = await asyncio.gather(*(one(body) for body in due))
        await transport.aclose()
        return due, dict(started)

    try:
        due, start_ns = run_on(main())
    finally:
        server.close()
    arrivals = dict(server.arrivals)
    assert sorted(arrivals) == sorted(due)
    for body, due_ns in due.items():
        assert start_ns[body] >= due_ns, (body, (start_ns[body] - due_ns) / 1e6)
        # The server read it after it was due: the bytes did not leave early.
        assert arrivals[body] >= due_ns, (body, (arrivals[body] - due_ns) / 1e6)


def test_a_request_past_its_due_time_is_written_at_once(run_on):
    server = _StampingServer()

    async def main():
        transport, head = _transport(server.url)
        before = perf_counter_ns()
        response = await transport.send(head, b"late", not_before_ns=before - 1_000_000)
        await response.read()
        await response.aclose()
        await transport.aclose()
        return before, response.start_ns

    try:
        before, start_ns = run_on(main())
    finally:
        server.close()
    assert start_ns >= before and [body for body, _ in server.arrivals] == [b"late"]


def test_a_connection_dropped_while_its_request_waits_is_replaced(run_on):
    # The server closes its side 10 ms after the first answer; the second request has taken that
    # idle connection and waits for its due time, 60 ms on: it goes on a new connection instead.
    async def handler(request, writer, server):
        writer.write(response_bytes(200, b"ok"))
        if request.body == b"first":
            await writer.drain()
            await asyncio.sleep(0.01)
            return False
        return None

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = _transport(server.url)
            response = await transport.send(head, b"first")
            await response.read()
            await response.aclose()
            due_ns = perf_counter_ns() + 60_000_000
            response = await transport.send(head, b"second", not_before_ns=due_ns)
            body = await response.read()
            await response.aclose()
            await transport.aclose()
            return due_ns, response, body, server.connections, [r.body for r in server.requests]

    due_ns, response, body, connections, bodies = run_on(main())
    assert body == b"ok" and bodies == [b"first", b"second"]
    assert connections == 2 and not response.reused and response.start_ns >= due_ns


def test_a_failure_after_the_write_says_when_the_request_was_written(run_on):
    # Prepared ahead, written when due, then no answer: the read timeout's error carries the write
    # time, so the failed attempt is timed from the write (as an answered one is), not from when
    # it was prepared.
    async def handler(request, writer, server):
        await asyncio.sleep(5)

    async def main():
        async with ScriptedServer(handler) as server:
            origin, _ = split_url(server.url)
            transport = HTTPTransport(origin, max_connections=4, timeouts=Timeouts(connect=5, read=0.2, total=10))
            head = build_head("POST", "/v1/x", origin, {})
            prepared_ns = perf_counter_ns()
            due_ns = prepared_ns + 30_000_000
            with pytest.raises(TransportError) as failure:
                await transport.send(head, b"{}", not_before_ns=due_ns)
            await transport.aclose()
            return due_ns, failure.value

    due_ns, error = run_on(main())
    assert error.kind == "timeout" and error.written_ns is not None and error.written_ns >= due_ns
    assert error.written_at is not None


def test_a_request_cancelled_while_it_waits_is_never_written(run_on):
    server = _StampingServer()

    async def main():
        transport, head = _transport(server.url)
        waiting = asyncio.create_task(transport.send(head, b"cancelled", not_before_ns=perf_counter_ns() + 100_000_000))
        await asyncio.sleep(0.02)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await asyncio.sleep(0.2)            # past the due time: its timer must not write it
        response = await transport.send(head, b"next")      # and its pool slot was given back
        await response.read()
        await response.aclose()
        await transport.aclose()

    try:
        run_on(main())
    finally:
        server.close()
    assert [body for body, _ in server.arrivals] == [b"next"]
