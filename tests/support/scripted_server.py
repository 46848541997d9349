"""A scripted loopback HTTP server for the transport and adapter tests (helpers only, no tests).

Each test passes a handler `async def handler(request, writer, server) -> bool | None` that writes
raw response bytes; returning False closes the connection. The server reads requests itself
(head, then a Content-Length body), so tests control exactly what goes on the wire.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.emulator import wire_samples_dir

pytestmark = pytest.mark.emulator

DATA = Path(__file__).resolve().parents[1] / "data"
WIRE_SAMPLES = wire_samples_dir()


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    connection: int              # which accepted connection it came on (0, 1, ...)

    def json(self) -> Any:
        return json.loads(self.body)


Handler = Callable[[Request, asyncio.StreamWriter, "ScriptedServer"], Awaitable["bool | None"]]


@dataclass
class ScriptedServer:
    handler: Handler
    requests: list[Request] = field(default_factory=list)
    connections: int = 0
    open_connections: int = 0
    max_open: int = 0
    port: int = 0

    async def __aenter__(self) -> ScriptedServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = self.connections
        self.connections += 1
        self.open_connections += 1
        self.max_open = max(self.max_open, self.open_connections)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if line:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = Request(method, path, headers, body, number)
                self.requests.append(request)
                keep = await self.handler(request, writer, self)
                await writer.drain()
                if keep is False:
                    break
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.open_connections -= 1
            writer.close()


def response_bytes(status: int = 200, body: bytes = b"", headers: dict[str, str] | None = None,
                   *, chunks: list[bytes] | None = None, reason: str = "OK") -> bytes:
    """A complete response; with `chunks`, chunked transfer coding (body is ignored)."""
    lines = [f"HTTP/1.1 {status} {reason}"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    if chunks is not None:
        lines.append("Transfer-Encoding: chunked")
        out = ("\r\n".join(lines) + "\r\n\r\n").encode()
        for chunk in chunks:
            out += b"%x\r\n%s\r\n" % (len(chunk), chunk)
        return out + b"0\r\n\r\n"
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def json_response(status: int, obj: Any, headers: dict[str, str] | None = None) -> bytes:
    return response_bytes(status, json.dumps(obj).encode(),
                          {"Content-Type": "application/json", **(headers or {})})


def sse_events(raw: bytes) -> list[bytes]:
    """A recorded SSE body cut into its events (each with its blank line), for chunked replay."""
    text = raw.replace(b"\r\n", b"\n")
    return [part + b"\n\n" for part in text.split(b"\n\n") if part.strip()]


def sse_head(status: int = 200, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} OK", "Content-Type: text/event-stream",
             "Transfer-Encoding: chunked"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"
