"""A loopback OpenAI Chat Completions streaming server with a fixed schedule, for client timing.

Every POST gets response headers at once, then at exactly `first_delay` after the request was
read the role chunk and the first content chunk, then the other content chunks `gap` apart, and
with the last one the finish chunk, the usage chunk and `data: [DONE]` (chunked transfer coding,
so keep-alive works). Each event is written at an absolute deadline (`loop.call_at`), so a late
write does not push the later ones back, and every byte is encoded once at start-up: the server
costs a few microseconds per event and its own lateness is measured and reported, so that what
remains of a measured TTFT above `first_delay` belongs to the client.

Runs in its own process (`serve`), driven over a multiprocessing pipe: "stats" returns the
lateness of the first-token writes since the last "stats", "stop" ends it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from multiprocessing.connection import Connection

import machine

MODEL = "bench-model"
CONTENT_CHUNKS = 20
_WORDS = ("Once upon a time a small robot measured the latency of every stream it could find "
          "and wrote each number down").split()


def _chunked(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(delta: dict, finish: str | None = None, usage: dict | None = None) -> bytes:
    chunk = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1727346168,
             "model": MODEL, "system_fingerprint": "fp_bench",
             "choices": [] if usage else [{"index": 0, "delta": delta, "logprobs": None,
                                           "finish_reason": finish}]}
    if usage:
        chunk["usage"] = usage
    return _chunked(b"data: %s\n\n" % json.dumps(chunk, separators=(",", ":")).encode())


def encode_response(n_chunks: int = CONTENT_CHUNKS) -> tuple[bytes, list[bytes]]:
    """The response head and the bytes written at each of the `n_chunks` deadlines."""
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"cache-control: no-cache\r\nx-request-id: req_bench\r\ntransfer-encoding: chunked\r\n\r\n")
    words = [(" " if i else "") + _WORDS[i % len(_WORDS)] for i in range(n_chunks)]
    writes = [_event({"content": word}) for word in words]
    writes[0] = _event({"role": "assistant", "content": "", "refusal": None}) + writes[0]
    writes[-1] += (_event({}, finish="length")
                   + _event({}, usage={"prompt_tokens": 140, "completion_tokens": n_chunks,
                                       "total_tokens": 140 + n_chunks})
                   + _chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    return head, writes


_MODELS_BODY = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0,
                                                          "owned_by": "bench"}]}).encode()
_MODELS = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(_MODELS_BODY), _MODELS_BODY)
_NOT_FOUND = (b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 52\r\n\r\n"
              b'{"error":{"message":"not found","type":"not_found"}}')


class _Stream(asyncio.Protocol):
    __slots__ = ("server", "transport", "buf", "busy", "close_after", "t0", "handle")

    def __init__(self, server: FixedDelayServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False
        self.close_after = False
        self.t0 = 0.0
        self.handle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._next_request()

    def _next_request(self) -> None:
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(buf[:end]).lower()
        length = 0
        at = head.find(b"\r\ncontent-length:")
        if at >= 0:
            line_end = head.find(b"\r\n", at + 2)
            length = int(head[at + 17:line_end if line_end >= 0 else len(head)])
        if len(buf) < end + 4 + length:
            return
        del buf[:end + 4 + length]
        self.close_after = b"\r\nconnection: close" in head
        if head.startswith(b"get ") and (b"/health " in head[:100] or b"/models " in head[:100]):
            self.transport.write(_MODELS)        # peers (guidellm) check the server before they start
            self._finished()
            return
        if not head.startswith(b"post ") or b"/chat/completions " not in head[:200]:
            self.transport.write(_NOT_FOUND)
            self._finished()
            return
        server = self.server
        self.busy = True
        self.t0 = server.loop.time()
        self.transport.write(server.head)
        self.handle = server.loop.call_at(self.t0 + server.first_delay, self._send, 0)

    def _send(self, index: int) -> None:
        server = self.server
        due = self.t0 + server.first_delay + index * server.gap
        if index == 0:
            server.first_lateness_ms.append((server.loop.time() - due) * 1e3)
        self.transport.write(server.writes[index])
        index += 1
        if index < len(server.writes):
            self.handle = server.loop.call_at(due + server.gap, self._send, index)
        else:
            self.handle = None
            server.served += 1
            self._finished()

    def _finished(self) -> None:
        self.busy = False
        if self.close_after:
            self.transport.close()
        elif self.buf:
            self._next_request()


class FixedDelayServer:
    def __init__(self, loop: asyncio.AbstractEventLoop, first_delay: float, gap: float,
                 n_chunks: int = CONTENT_CHUNKS) -> None:
        self.loop = loop
        self.first_delay = first_delay
        self.gap = gap
        self.head, self.writes = encode_response(n_chunks)
        self.first_lateness_ms: list[float] = []
        self.served = 0
        self.cpu_mark = time.process_time()

    def take_stats(self) -> dict:
        lateness = sorted(self.first_lateness_ms)
        self.first_lateness_ms = []
        served, self.served = self.served, 0
        # CPU time per request during a phase, for the reader: it moves with the host's speed and,
        # when the cores are busy, with the client's load too (machine.HostSpeed.run_level).
        cpu_now = time.process_time()
        cpu_s, self.cpu_mark = cpu_now - self.cpu_mark, cpu_now

        def pick(q: float) -> float | None:
            return lateness[min(len(lateness) - 1, int(q * len(lateness)))] if lateness else None

        return {"served": served, "first_late_p50_ms": pick(0.50), "first_late_p99_ms": pick(0.99),
                "first_late_max_ms": lateness[-1] if lateness else None, "cpu_s": cpu_s}


def serve(control: Connection, first_delay: float = 0.100, gap: float = 0.020, backlog: int = 4096) -> None:
    """Process entry: listen on 127.0.0.1 (a free port, sent back over `control`) until "stop"."""
    machine.raise_fd_limit()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    server = FixedDelayServer(loop, first_delay, gap)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    listener = loop.run_until_complete(
        loop.create_server(lambda: _Stream(server), sock=sock, backlog=backlog))
    stopped = loop.create_future()

    def on_control() -> None:
        try:
            message = control.recv()
        except EOFError:
            message = "stop"
        if message == "stats":
            control.send(server.take_stats())
        elif not stopped.done():
            stopped.set_result(None)

    loop.add_reader(control.fileno(), on_control)
    control.send(sock.getsockname()[1])
    loop.run_until_complete(stopped)
    loop.remove_reader(control.fileno())
    listener.close()
    loop.close()
