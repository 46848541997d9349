"""Minimal HTTP/1.1 for the emulator: read one request, frame responses.

Keep-alive is the default (HTTP/1.1). Fixed responses carry content-length; streams use chunked
transfer encoding, as the hosted APIs do, so a connection is reusable after a stream that ended
normally. Request bodies may come with content-length or chunked. No pipelining tricks: a
connection's requests are answered in order, one at a time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 32 * 1024 * 1024   # the Messages API's own request limit
LAST_CHUNK = b"0\r\n\r\n"

_REASONS = {
    200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
    413: "Payload Too Large", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
    500: "Internal Server Error", 503: "Service Unavailable", 529: "Overloaded",
}


class ReceiveStampingProtocol(asyncio.StreamReaderProtocol):
    """asyncio.start_server's protocol, plus when bytes last came in.

    A request arrives when its last byte is received, not when its handler next gets to run: on
    a busy loop the two differ by a loop iteration, which would otherwise go uncounted in both the
    schedule and the ground truth. (A client that pipelines requests can move an earlier
    request's stamp later; the SDKs do not pipeline.)
    """

    received_loop_time = 0.0   # loop.time()
    received_ns = 0            # time.perf_counter_ns()
    received_wall_ns = 0       # time.time_ns()
    _loop: asyncio.AbstractEventLoop   # set by StreamReaderProtocol's base; typeshed leaves it out

    def data_received(self, data: bytes) -> None:
        self.received_loop_time = self._loop.time()
        self.received_ns = time.perf_counter_ns()
        self.received_wall_ns = time.time_ns()
        super().data_received(data)


async def start_server(handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
                       host: str, port: int) -> asyncio.Server:
    """asyncio.start_server with ReceiveStampingProtocol, and a listen queue deep enough for a
    burst of 512 connections (the default of 100 would make clients retry SYNs, a 1 s stall)."""
    loop = asyncio.get_running_loop()

    def protocol() -> ReceiveStampingProtocol:
        return ReceiveStampingProtocol(asyncio.StreamReader(limit=MAX_HEAD_BYTES, loop=loop), handler, loop=loop)

    return await loop.create_server(protocol, host, port, backlog=1024, reuse_address=True)


class HttpError(Exception):
    """The request cannot be read as HTTP; answer with `status` and close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class HttpRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]      # names lower-cased
    body: bytes
    keep_alive: bool


async def read_request(reader: asyncio.StreamReader) -> HttpRequest | None:
    """The next request on the connection, or None if the client closed it between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise HttpError(400, "connection closed inside the request head") from None
        return None
    except asyncio.LimitOverrunError:
        raise HttpError(431, "request head too large") from None
    lines = head[:-4].decode("latin-1").lstrip("\r\n").split("\r\n")
    try:
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise HttpError(400, f"bad request line {lines[0]!r}") from None
    if not version.startswith("HTTP/1."):
        raise HttpError(400, f"unsupported protocol {version!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpError(400, f"bad header line {line!r}")
        headers[name.strip().lower()] = value.strip()
    path, _, query = target.partition("?")
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    body = await _read_body(reader, headers)
    return HttpRequest(method.upper(), path, query, headers, body, keep_alive)


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return await _read_chunked(reader)
        length_text = headers.get("content-length")
        if length_text is None:
            return b""
        try:
            length = int(length_text)
        except ValueError:
            raise HttpError(400, f"bad content-length {length_text!r}") from None
        if length < 0:
            raise HttpError(400, f"bad content-length {length_text!r}")
        if length > MAX_BODY_BYTES:
            raise HttpError(413, "request body too large")
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise HttpError(400, "connection closed inside the request body") from None


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise HttpError(400, "bad chunk size") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":   # trailers, ignored
                pass
            return b"".join(parts)
        total += size
        if total > MAX_BODY_BYTES:
            raise HttpError(413, "request body too large")
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise HttpError(400, "chunk not followed by CRLF")


def response_head(status: int, headers: list[tuple[str, str]], *, content_length: int | None = None,
                  keep_alive: bool = True) -> bytes:
    """Status line and headers; chunked transfer encoding when `content_length` is None."""
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}"]
    lines.extend(f"{name}: {value}" for name, value in headers)
    if content_length is None:
        lines.append("transfer-encoding: chunked")
    else:
        lines.append(f"content-length: {content_length}")
    lines.append("connection: keep-alive" if keep_alive else "connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def full_response(status: int, headers: list[tuple[str, str]], body: bytes, *,
                  keep_alive: bool = True) -> bytes:
    return response_head(status, headers, content_length=len(body), keep_alive=keep_alive) + body


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)
