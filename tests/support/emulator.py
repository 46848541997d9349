"""Test helpers for the emulator: a running instance, a raw HTTP/1.1 client, an SSE splitter.

The raw client is deliberately tiny and cheap (plain asyncio streams), so that timing tests
measure the emulator and not an HTTP library.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prober.emulator import Emulator, Scenario
from prober.emulator.behaviours import Behaviour, base_behaviours
from prober.emulator.caching import PromptCache


def run(coro: Any) -> Any:
    """Run a coroutine to completion in a fresh event loop (no pytest-asyncio here)."""
    return asyncio.run(coro)


@contextlib.asynccontextmanager
async def running(scenario: Scenario | None = None,
                  behaviours: list[Behaviour] | None = None) -> AsyncIterator[Emulator]:
    emulator = Emulator(scenario or Scenario(), behaviours)
    await emulator.start("127.0.0.1", 0)
    try:
        yield emulator
    finally:
        await emulator.stop()


class ManualClock:
    """A clock a test moves by hand, for the prompt cache's TTLs: `clock.advance(301)`."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def cache_on_clock(scenario: Scenario, clock: ManualClock) -> list[Behaviour]:
    """The scenario's usual behaviour chain, with the prompt cache's TTLs on `clock`."""
    return [PromptCache(scenario, clock=clock) if isinstance(behaviour, PromptCache) else behaviour
            for behaviour in base_behaviours(scenario)]


def wire_samples_dir() -> Path:
    """The recorded wire samples, committed under tests/data/wire-samples."""
    return Path(__file__).resolve().parents[1] / "data" / "wire-samples"


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes = b""
    chunks: list[tuple[int, bytes]] = field(default_factory=list)   # (perf_counter_ns on arrival, payload)
    complete: bool = True      # the body ended as its framing said (terminating chunk or full length)
    sent_ns: int = 0           # perf_counter_ns just before the request was written

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[tuple[str | None, str]]:
        return sse_events(self.body)


def sse_events(body: bytes) -> list[tuple[str | None, str]]:
    """(event name or None, data) for each blank-line-separated SSE event."""
    events = []
    for block in body.decode().split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                data.append(line[len("data: "):])
        events.append((name, "\n".join(data)))
    return events


class RawConnection:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> RawConnection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()

    async def request(self, method: str, path: str, body: Any = None,
                      headers: dict[str, str] | None = None) -> RawResponse:
        sent_ns = self._send(method, path, body, headers)
        response = await self._read_head()
        response.sent_ns = sent_ns
        await self._read_body(response)
        return response

    async def request_until(self, method: str, path: str, body: Any, marker: bytes) -> RawResponse:
        """Send a streaming request and read its chunks until one holds `marker` (say, the first
        content token); `finish(response)` reads the rest."""
        sent_ns = self._send(method, path, body, None)
        response = await self._read_head()
        response.sent_ns = sent_ns
        assert response.headers.get("transfer-encoding") == "chunked", response.headers
        while not response.chunks or marker not in response.chunks[-1][1]:
            size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
            assert size, f"stream ended before {marker!r}"
            data = await self.reader.readexactly(size + 2)
            response.chunks.append((time.perf_counter_ns(), data[:-2]))
        return response

    async def finish(self, response: RawResponse) -> RawResponse:
        """Read the rest of a response begun with request_until."""
        await self._read_body(response)
        response.body = b"".join(payload for _, payload in response.chunks)
        return response

    def _send(self, method: str, path: str, body: Any, headers: dict[str, str] | None) -> int:
        payload = body if isinstance(body, bytes) else (b"" if body is None else json.dumps(body).encode())
        lines = [f"{method} {path} HTTP/1.1", "host: 127.0.0.1", f"content-length: {len(payload)}",
                 "content-type: application/json"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        sent_ns = time.perf_counter_ns()
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        return sent_ns

    async def _read_head(self) -> RawResponse:
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return RawResponse(status=int(status_line.split(" ")[1]), headers=headers)

    async def _read_body(self, response: RawResponse) -> None:
        try:
            if response.headers.get("transfer-encoding") == "chunked":
                parts = []
                while True:
                    size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                    if size == 0:
                        await self.reader.readexactly(2)
                        break
                    data = await self.reader.readexactly(size + 2)
                    response.chunks.append((time.perf_counter_ns(), data[:-2]))
                    parts.append(data[:-2])
                response.body = b"".join(parts)
            else:
                response.body = await self.reader.readexactly(int(response.headers.get("content-length", 0)))
        except asyncio.IncompleteReadError as exc:
            response.body = b"".join(part for _, part in response.chunks) or exc.partial
            response.complete = False


async def raw_request(port: int, method: str, path: str, body: Any = None,
                      headers: dict[str, str] | None = None) -> RawResponse:
    connection = await RawConnection.open(port)
    try:
        return await connection.request(method, path, body, headers)
    finally:
        await connection.close()


def anthropic_body(text: str = "Hello there", *, stream: bool = True, max_tokens: int = 256,
                   **extra: Any) -> dict[str, Any]:
    return {"model": "emulator-1", "max_tokens": max_tokens, "stream": stream,
            "messages": [{"role": "user", "content": text}], **extra}


def openai_body(text: str = "Hello there", *, stream: bool = True, include_usage: bool = True,
                **extra: Any) -> dict[str, Any]:
    body = {"model": "emulator-1", "stream": stream, "messages": [{"role": "user", "content": text}], **extra}
    if stream and include_usage:
        body["stream_options"] = {"include_usage": True}
    return body
