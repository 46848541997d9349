"""A minimal HTTP/1.1 client on plain asyncio, for the adapters' hot path.

Why not httpx or aiohttp: at a few hundred concurrent streams on 2 cores the client's own CPU cost
per request decides the measured TTFT; a protocol object that parses
straight out of one receive buffer stays within milliseconds where httpx adds seconds.

What it does, and no more: one origin per `HTTPTransport`; requests written in one piece;
responses framed by Content-Length, chunked transfer coding or connection close; a LIFO keep-alive
pool bounded by `max_connections` (in-flight requests wait for a slot, the wait is reported);
connect, read (idle) and total timeouts; arrival timestamps taken in `data_received`, before any
parsing, so that neither a busy consumer nor other streams' parsing shifts them.

Connection reuse rules (llama-server closes a keep-alive connection after a streamed response
without saying so): a connection goes back to the pool only if its response was read to the end,
the server did not send `Connection: close`, and nothing else arrived after the response. A pooled
connection that fails before a single response byte arrives is retried once on a fresh connection;
that is safe for POST because the server cannot have produced anything.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
import ssl
import urllib.request
import zlib
from collections import deque
from collections.abc import Callable, Mapping
from time import perf_counter_ns
from typing import NamedTuple
from urllib.parse import unquote, urlsplit

from prober.core.config import Timeouts

_MAX_HEAD = 64 * 1024            # response header block
_HIGH_WATER = 1 << 20            # pause reading when this much is buffered and unconsumed
_USER_AGENT = "prober/0.1"


class TransportError(Exception):
    """A request that failed below HTTP: `kind` is `connection`, `timeout` or `protocol`.

    `before_response` is true when not a single response byte had arrived, which is what makes a
    failure on a reused connection safe to retry. `written_ns` and `written_at` are when the
    request was written, where it was before the failure (the Response's `start_ns`, `started_at`).
    """

    def __init__(self, kind: str, message: str, *, before_response: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.before_response = before_response
        self.written_ns: int | None = None
        self.written_at: dt.datetime | None = None


class Origin(NamedTuple):
    scheme: str
    host: str
    port: int

    @property
    def authority(self) -> str:
        """host:port, always with the port (a CONNECT target, a proxy's address)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


def split_url(url: str) -> tuple[Origin, str]:
    """`https://h:1/a/b` -> (Origin('https', 'h', 1), '/a/b'); the path has no trailing slash."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    port = parts.port or (443 if scheme == "https" else 80)
    return Origin(scheme, parts.hostname, port), parts.path.rstrip("/")


class Proxy(NamedTuple):
    """An HTTP proxy: its address, and the Proxy-Authorization value when its URL had credentials
    (sent to the proxy only; never stored, never shown: `address` is what a sample records)."""
    origin: Origin
    authorization: str | None

    @property
    def address(self) -> str:
        return self.origin.authority


def proxy_for(origin: Origin, environ: Mapping[str, str] | None = None) -> Proxy | None:
    """The proxy the official SDKs (httpx, trusting the environment) would use for `origin`:
    HTTPS_PROXY for https, HTTP_PROXY for http, ALL_PROXY for either (lower case wins, as in
    urllib); none when NO_PROXY names the host ("*", a host, a domain and its subdomains, with or
    without a leading dot, optionally with a port). Raises ValueError for a proxy URL prober
    cannot use (only http:// proxies: CONNECT tunnels https through them)."""
    env = os.environ if environ is None else environ
    proxies: dict[str, str] = {}
    for name, value in env.items():                 # as urllib.request.getproxies_environment
        lower = name.lower()
        if value and lower.endswith("_proxy"):
            if name == lower or lower[:-6] not in proxies:
                proxies[lower[:-6]] = value
    url = proxies.get(origin.scheme) or proxies.get("all")
    if not url:
        return None
    # Undocumented but present since Python 3.0; typeshed leaves it out.
    if urllib.request.proxy_bypass_environment(origin.authority, proxies):  # type: ignore[attr-defined]
        return None
    if "://" not in url:
        url = f"http://{url}"                       # httpx reads a bare host:port as http
    parts = urlsplit(url)
    if parts.scheme.lower() != "http" or not parts.hostname:
        raise ValueError(f"{origin.scheme}_proxy {url!r}: prober speaks to proxies over http:// only")
    authorization = None
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(credentials.encode()).decode("ascii")
    return Proxy(Origin("http", parts.hostname, parts.port or 80), authorization)


def build_head(method: str, path: str, origin: Origin, headers: dict[str, str]) -> bytes:
    """The request line and headers up to (not including) Content-Length and the blank line.
    Built once per endpoint: only the length changes between requests."""
    # identity: a compressed stream would hold back tokens until a compressor block fills, and
    # decoding costs CPU per chunk; a server that compresses anyway is still decoded (Response).
    lines = [f"{method} {path} HTTP/1.1", f"host: {origin.host_header}", f"user-agent: {_USER_AGENT}",
             "accept-encoding: identity"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")


_ssl_context: ssl.SSLContext | None = None


def default_ssl_context() -> ssl.SSLContext:
    """The system trust store, or certifi's when the system has none."""
    global _ssl_context
    if _ssl_context is None:
        context = ssl.create_default_context()
        if not context.cert_store_stats().get("x509_ca"):
            try:
                import certifi
                context.load_verify_locations(certifi.where())
            except ImportError:
                pass
        context.set_alpn_protocols(["http/1.1"])
        _ssl_context = context
    return _ssl_context


class _Arrivals:
    """Connections whose bytes arrived and wait to be parsed, oldest first, parsed a few per turn
    of the event loop.

    A turn of the loop reads every socket that is ready (data_received stamps the bytes), then runs
    what the previous turn scheduled. Parsing all waiting streams in one callback would hold the
    loop for the whole burst (512 streams: tens of ms), and bytes arriving meanwhile would be read,
    and stamped, only after it. A few at a time, the loop looks at its sockets again between
    batches, so a stamp waits at most one batch's parsing."""

    BATCH = 16

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._waiting: deque[_Connection] = deque()
        self._scheduled = False

    def add(self, conn: _Connection) -> None:
        self._waiting.append(conn)
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._parse_some)

    def _parse_some(self) -> None:
        waiting = self._waiting
        try:
            for _ in range(min(self.BATCH, len(waiting))):
                waiting.popleft()._parse_arrival()
        finally:            # whatever one parse raised, the streams behind it are still parsed
            if waiting:
                self.loop.call_soon(self._parse_some)     # after the reads of the loop's next turn
            else:
                self._scheduled = False


class _Connection(asyncio.Protocol):
    """One socket: a receive buffer, the arrival time of the latest bytes, and the timers."""

    def __init__(self, loop: asyncio.AbstractEventLoop, arrivals: _Arrivals) -> None:
        self.loop = loop
        self.arrivals = arrivals
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.recv_ns = 0                       # arrival of the latest data, or when a request was armed
        self.eof = False
        self.error: TransportError | None = None
        self.waiter: asyncio.Future[None] | None = None
        # While a response is pushed (Response.stream), called for every arrival (a few at a time,
        # by _Arrivals, after the arrival is stamped) instead of waking a waiting task: no task
        # switch per chunk.
        self.on_arrival: Callable[[], None] | None = None
        self.connect_ns: int | None = None     # time the connect (and TLS handshake) took
        self.connected_ns: int | None = None   # perf_counter_ns when it completed
        self.proxy_connect_ns: int | None = None   # of which: the TCP connect to the proxy
        self.tunnel_ns: int | None = None          # of which: CONNECT until the proxy said 200
        self._reading_paused = False
        self._parse_pending = False            # bytes stamped, waiting in _Arrivals to be parsed
        self._write_waiter: asyncio.Future[None] | None = None
        self._writing_paused = False
        self._timer: asyncio.TimerHandle | None = None
        self._read_timeout_ns = 0
        self._deadline_ns = 0
        self._read_timeout_s = 0.0
        self._total_timeout_s = 0.0

    # asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        now = perf_counter_ns()
        if self.on_arrival is not None:
            # Stamp now, parse a little later (_Arrivals): bytes of many streams arriving together
            # (a closed loop's round sends its requests together, so their first tokens come
            # together) are each stamped when read, not after the SSE and JSON work of the streams
            # read before them (p99 TTFT overhead at 512 streams, issue 13).
            if self._parse_pending:
                self._parse_arrival()           # earlier bytes not parsed yet: with their own stamp
            self.buf += data
            self.recv_ns = now
            self._parse_pending = True
            self.arrivals.add(self)
            return
        self.buf += data
        self.recv_ns = now
        self._wake()
        if len(self.buf) > _HIGH_WATER and not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def _parse_arrival(self) -> None:
        if not self._parse_pending:
            return                  # parsed already (a later arrival, or the end of the stream, came first)
        self._parse_pending = False
        if self.on_arrival is not None:
            self.on_arrival()
        else:
            self._wake()            # the response stopped being pushed meanwhile: a reader waits

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        if exc is not None and self.error is None:
            self.error = TransportError("connection", f"connection lost: {exc}")
        self._cancel_timer()
        self._wake()
        if self._write_waiter is not None and not self._write_waiter.done():
            self._write_waiter.set_result(None)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._write_waiter is not None and not self._write_waiter.done():
            self._write_waiter.set_result(None)

    # used by the pool and the response ---------------------------------------------------------
    @property
    def usable(self) -> bool:
        return not self.eof and self.error is None and not self.buf and self.transport is not None \
            and not self.transport.is_closing()

    def _wake(self) -> None:
        if self.on_arrival is not None:
            self._parse_pending = False         # the push parses whatever is buffered
            self.on_arrival()
            return
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self) -> None:
        """Wait for more data, end of stream or a failure (the caller checks which)."""
        if self.error is not None or self.eof:
            return
        if self._reading_paused and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()
        waiter = self.loop.create_future()
        self.waiter = waiter
        try:
            await waiter
        finally:
            if self.waiter is waiter:
                self.waiter = None

    async def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)
        await self.writable()

    async def writable(self) -> None:
        """Return once the transport takes more bytes (at once, unless the kernel's buffer is full)."""
        while self._writing_paused and not self.eof and self.error is None:
            self._write_waiter = self.loop.create_future()
            await self._write_waiter

    def arm(self, timeouts: Timeouts, deadline_ns: int) -> None:
        """Start the read (idle) and total timers for one request. One timer per connection,
        re-armed lazily: data arrival only updates `recv_ns`, so chunks cost no timer churn."""
        read_timeout = timeouts.read
        self.recv_ns = perf_counter_ns()
        self._read_timeout_s = read_timeout
        self._total_timeout_s = timeouts.total
        self._read_timeout_ns = int(read_timeout * 1e9)
        self._deadline_ns = deadline_ns
        self._schedule(self.recv_ns)

    def _schedule(self, now: int) -> None:
        due = min(self.recv_ns + self._read_timeout_ns, self._deadline_ns)
        self._timer = self.loop.call_later(max(due - now, 0) / 1e9, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = perf_counter_ns()
        if now >= self._deadline_ns:
            self.fail(TransportError("timeout", f"total timeout: the request took longer than "
                                                f"{self._total_timeout_s:g}s"))
        elif now >= self.recv_ns + self._read_timeout_ns:
            self.fail(TransportError("timeout", f"read timeout: no data for {self._read_timeout_s:g}s"))
        else:
            self._schedule(now)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def disarm(self) -> None:
        self._cancel_timer()

    def fail(self, error: TransportError) -> None:
        if self.error is None:
            self.error = error
        self.close()
        self._wake()

    def close(self) -> None:
        self._cancel_timer()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()


def _chunk_size_with_extensions(line: bytes) -> int:
    try:
        return int(line.split(b";", 1)[0], 16)
    except ValueError:
        raise TransportError("protocol", f"bad chunk size line: {line[:40]!r}") from None


def _discard(data: bytes, ns: int) -> bool:
    return False


_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _UNTIL_CLOSE, _DONE = range(8)


class Response:
    """A response whose head has been read; the body is read with `next_chunk()`, `read()` or
    `drain()`. `aclose()` must be called (it releases the connection and the pool slot)."""

    __slots__ = ("status", "reason", "http_version", "headers", "start_ns", "started_at",
                 "headers_ns", "first_byte_ns", "end_ns", "reused", "connect_ns", "connected_ns",
                 "pool_wait_ns", "proxy_connect_ns", "tunnel_ns",
                 "_conn", "_pool", "_state", "_remaining", "_keep_alive", "_released",
                 "_on_data", "_pushed", "_inflater")

    def __init__(self, conn: _Connection, pool: HTTPTransport, *, reused: bool) -> None:
        self._conn = conn
        self._pool = pool
        self.reused = reused
        self.connect_ns = None if reused else conn.connect_ns
        self.connected_ns = None if reused else conn.connected_ns
        self.proxy_connect_ns = None if reused else conn.proxy_connect_ns
        self.tunnel_ns = None if reused else conn.tunnel_ns
        self.status = 0
        self.reason = ""
        self.http_version = ""
        self.headers: dict[str, str] = {}
        self.start_ns = 0
        self.started_at: dt.datetime | None = None
        self.headers_ns = 0
        self.first_byte_ns: int | None = None
        self.end_ns: int | None = None          # arrival of the last bytes, once released
        self.pool_wait_ns = 0
        self._state = _HEAD
        self._remaining = 0
        self._keep_alive = False
        self._released = False
        self._on_data: Callable[[bytes, int], bool] | None = None
        self._pushed: asyncio.Future[None] | None = None
        # Set while a Content-Encoding is being undone (`_decode`). Not a bound method kept on the
        # instance: that would make every Response a reference cycle, freed only by the garbage
        # collector, whose pauses then grow with the number of requests.
        self._inflater: zlib._Decompress | None = None

    @property
    def last_ns(self) -> int:
        """Arrival time of the most recent bytes: the timestamp of whatever `next_chunk` returned."""
        return self._conn.recv_ns

    @property
    def complete(self) -> bool:
        return self._state == _DONE

    # head ------------------------------------------------------------------------------------
    async def _read_head(self, method: str) -> None:
        conn = self._conn
        buf = conn.buf
        while True:
            scan_from = 0
            while True:
                end = buf.find(b"\r\n\r\n", scan_from)
                if end >= 0:
                    break
                if len(buf) > _MAX_HEAD:
                    raise TransportError("protocol", "response header block too large")
                scan_from = max(len(buf) - 3, 0)
                if conn.error is not None:
                    raise TransportError(conn.error.kind, str(conn.error), before_response=not buf
                                         and conn.error.kind == "connection")
                if conn.eof:
                    raise TransportError("connection", "server closed the connection before sending a "
                                         "response" if not buf else "connection closed inside the "
                                         "response headers", before_response=not buf)
                await conn.wait()
            self.headers_ns = conn.recv_ns
            head = bytes(buf[:end])
            del buf[:end + 4]
            self._parse_head(head)
            if self.status >= 200 or self.status == 101:
                break
            self.headers = {}       # an interim 1xx response: the real one follows
        self._frame(method)
        encoding = self.headers.get("content-encoding", "identity").strip().lower()
        if encoding != "identity" and self._state != _DONE:
            self._start_inflating(encoding)
        if buf and self._state != _DONE:
            self.first_byte_ns = conn.recv_ns

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        code, _, reason = rest.partition(b" ")
        if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise TransportError("protocol", f"malformed status line: {lines[0][:100]!r}")
        self.http_version = version.decode("latin-1")
        self.status = int(code)
        self.reason = reason.decode("latin-1")
        headers = self.headers
        last = None
        for line in lines[1:]:
            if line[:1] in (b" ", b"\t") and last is not None:       # obsolete line folding
                headers[last] += " " + line.strip().decode("latin-1")
                continue
            name, sep, value = line.partition(b":")
            if not sep:
                raise TransportError("protocol", f"malformed header line: {line[:100]!r}")
            key = name.strip().lower().decode("latin-1")
            text = value.strip().decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
            last = key

    def _frame(self, method: str) -> None:
        headers = self.headers
        connection = headers.get("connection", "").lower()
        if self.http_version == "HTTP/1.0":
            self._keep_alive = "keep-alive" in connection
        else:
            self._keep_alive = "close" not in connection
        if method == "HEAD" or self.status in (204, 304) or self.status < 200:
            self._state = _DONE
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = _CHUNK_SIZE
        elif "content-length" in headers:
            values = {v.strip() for v in headers["content-length"].split(",")}
            if len(values) != 1 or not next(iter(values)).isdigit():
                raise TransportError("protocol", f"bad content-length: {headers['content-length']!r}")
            self._remaining = int(values.pop())
            self._state = _LENGTH if self._remaining else _DONE
        else:
            self._state = _UNTIL_CLOSE
            self._keep_alive = False

    def _start_inflating(self, encoding: str) -> None:
        """prober asks for identity; a server that compresses anyway is decoded if it used gzip or
        deflate, and named otherwise (br and zstd need libraries prober does not carry)."""
        if encoding not in ("gzip", "x-gzip", "deflate"):
            raise TransportError("protocol", f"the server compressed the response with Content-Encoding "
                                             f"{encoding!r} although prober asked for identity; prober "
                                             f"decodes only gzip and deflate")
        self._inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)    # gzip or zlib header, detected

    def _decode(self) -> bytes:
        """Body bytes without framing; with a Content-Encoding, also decompressed."""
        return self._unframe() if self._inflater is None else self._unframe_and_inflate()

    def _unframe_and_inflate(self) -> bytes:
        data = self._unframe()
        inflater = self._inflater
        assert inflater is not None                # called only while inflating
        try:
            out = inflater.decompress(data) if data else b""
            if self._state == _DONE:
                out += inflater.flush()
                self._inflater = None               # a flushed decompressor takes no more
        except zlib.error as exc:
            raise TransportError("protocol", f"undecodable {self.headers['content-encoding']} body: "
                                             f"{exc}") from None
        return out

    # body ------------------------------------------------------------------------------------
    def _unframe(self) -> bytes:
        """Take every body byte already buffered (framing removed); b"" when nothing is ready."""
        buf = self._conn.buf
        state = self._state
        if state == _LENGTH:
            n = min(self._remaining, len(buf))
            if not n:
                return b""
            if n == len(buf):
                data = bytes(buf)
                buf.clear()
            else:
                data = bytes(buf[:n])
                del buf[:n]
            self._remaining -= n
            if not self._remaining:
                self._state = _DONE
            return data
        if state == _UNTIL_CLOSE:
            data = bytes(buf)
            buf.clear()
            return data
        pieces: list[bytes] = []
        while buf:
            if state == _CHUNK_SIZE:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > 1024:
                        raise TransportError("protocol", "chunk size line too long")
                    break
                line = buf[:end]
                del buf[:end + 2]
                try:
                    size = int(line, 16)
                except ValueError:
                    size = _chunk_size_with_extensions(bytes(line))
                if size < 0:
                    raise TransportError("protocol", f"bad chunk size line: {bytes(line)[:40]!r}")
                if size:
                    self._remaining = size
                    state = _CHUNK_DATA
                else:
                    state = _TRAILER
            elif state == _CHUNK_DATA:
                n = min(self._remaining, len(buf))
                if n == len(buf):
                    pieces.append(bytes(buf))
                    buf.clear()
                else:
                    pieces.append(bytes(buf[:n]))
                    del buf[:n]
                self._remaining -= n
                if not self._remaining:
                    state = _CHUNK_END
            elif state == _CHUNK_END:
                if len(buf) < 2:
                    break
                if buf[0] != 13 or buf[1] != 10:
                    raise TransportError("protocol", "chunk not followed by CRLF")
                del buf[:2]
                state = _CHUNK_SIZE
            elif state == _TRAILER:
                end = buf.find(b"\r\n")
                if end < 0:
                    break
                del buf[:end + 2]
                if end == 0:
                    state = _DONE
                    break
            else:
                break
        self._state = state
        if not pieces:
            return b""
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    async def next_chunk(self) -> bytes:
        """The next body bytes as they arrive (chunked framing removed); b"" at the end.
        `last_ns` is their arrival time. Raises TransportError."""
        conn = self._conn
        while True:
            data = self._decode()
            if data:
                if self.first_byte_ns is None:
                    self.first_byte_ns = conn.recv_ns
                return data
            if self._state == _DONE:
                self._release()
                return b""
            if conn.error is not None:
                raise TransportError(conn.error.kind, str(conn.error))
            if conn.eof:
                if self._state == _UNTIL_CLOSE:
                    self._state = _DONE
                    continue
                raise TransportError("connection", "connection closed before the response body ended")
            await conn.wait()

    async def stream(self, on_data: Callable[[bytes, int], bool]) -> None:
        """Push the body to `on_data(data, arrival_ns)` as it arrives, from a callback of the loop
        (_Arrivals) rather than a task: the cheapest way to consume a long stream (no task wake-up
        per chunk).
        `on_data` returns True to stop (its terminal event came); the rest of the body is then
        left for `drain()`. Returns when stopped or at the end of the body; raises TransportError,
        or whatever `on_data` raised."""
        conn = self._conn
        self._on_data = on_data
        self._pushed = conn.loop.create_future()
        conn.on_arrival = self._push
        try:
            self._push()
            await self._pushed
        finally:
            if conn.on_arrival == self._push:   # by now the connection may serve another request
                conn.on_arrival = None
            self._on_data = None
            self._pushed = None

    def _push(self) -> None:
        conn = self._conn
        pushed = self._pushed
        if pushed is None or pushed.done():
            return
        try:
            # One call takes everything buffered (a partial chunk-size line stays for the next
            # arrival), so there is no second call to find that nothing is left.
            data = self._unframe() if self._inflater is None else self._unframe_and_inflate()
            if data:
                if self.first_byte_ns is None:
                    self.first_byte_ns = conn.recv_ns
                if self._on_data(data, conn.recv_ns):       # type: ignore[misc]
                    pushed.set_result(None)
                    return
            if self._state == _DONE:
                self._release()
                pushed.set_result(None)
            elif conn.error is not None:
                pushed.set_exception(TransportError(conn.error.kind, str(conn.error)))
            elif conn.eof:
                if self._state == _UNTIL_CLOSE:
                    self._state = _DONE
                    self._release()
                    pushed.set_result(None)
                else:
                    pushed.set_exception(TransportError(
                        "connection", "connection closed before the response body ended"))
        except Exception as exc:      # a framing error, or on_data's own: the awaiting task gets it
            pushed.set_exception(exc)
        if pushed.done():
            conn.on_arrival = None

    async def read(self, limit: int | None = None) -> bytes:
        """The whole body (or its first `limit` bytes, after which the connection is dropped)."""
        parts = []
        size = 0
        while True:
            data = await self.next_chunk()
            if not data:
                break
            parts.append(data)
            size += len(data)
            if limit is not None and size >= limit:
                break
        return b"".join(parts)

    async def drain(self, grace: float) -> None:
        """After the terminal event: read what is left of the body so the connection can be
        reused, waiting at most `grace` seconds for it; otherwise the connection is dropped."""
        try:
            while self._decode():
                pass
            if self._state != _DONE and grace > 0:
                async with asyncio.timeout(grace):
                    await self.stream(_discard)
        except (TransportError, TimeoutError):
            pass
        if self._state == _DONE:
            self._release()

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        conn = self._conn
        self.end_ns = conn.recv_ns
        conn.disarm()
        reusable = self._state == _DONE and self._keep_alive and conn.usable
        self._pool._release(conn if reusable else None, conn)

    async def aclose(self) -> None:
        if not self._released:
            if self._state != _DONE:
                self._conn.close()      # never reuse a connection whose response was not read
            self._release()


def _write_now(conn: _Connection, response: Response, message: bytes, timeouts: Timeouts,
               deadline_ns: int) -> None:
    response.started_at = dt.datetime.now(dt.UTC)
    response.start_ns = perf_counter_ns()
    conn.arm(timeouts, deadline_ns)
    assert conn.transport is not None
    conn.transport.write(message)


async def _write_when_due(conn: _Connection, response: Response, message: bytes, due_ns: int,
                          timeouts: Timeouts, deadline_ns: int) -> None:
    """Write `message` from a loop timer at `due_ns`. The loop runs due timers before the
    callbacks its last poll queued (uvloop) or right after them (asyncio), whereas a task that
    slept until then would take its next step only after all of them. The loop's clock is not
    used: uvloop's ticks in whole milliseconds, and a timer that fires early is set again."""
    loop = conn.loop
    written: asyncio.Future[None] = loop.create_future()
    handle: asyncio.TimerHandle | None = None

    def fire() -> None:       # never after a cancel: the waiting task cancels its timer first
        nonlocal handle
        handle = None
        now = perf_counter_ns()
        if now < due_ns:
            handle = loop.call_later((due_ns - now) / 1e9, fire)
            return
        if conn.transport is None or conn.transport.is_closing():
            # Dropped while it waited (a server closing an idle connection): reading the head
            # finds it closed, and a reused connection is then replaced, as without the wait.
            response.started_at, response.start_ns = dt.datetime.now(dt.UTC), now
            written.set_result(None)
            return
        try:
            _write_now(conn, response, message, timeouts, deadline_ns)
        except Exception as exc:       # the task that waits raises it, as a direct write would
            written.set_exception(exc)
            return
        written.set_result(None)

    handle = loop.call_later((due_ns - perf_counter_ns()) / 1e9, fire)
    try:
        await written
    finally:
        if handle is not None:
            handle.cancel()


class HTTPTransport:
    """Keep-alive connections to one origin, at most `max_connections` requests in flight.

    Through a proxy when the environment names one for the origin (`proxy_for`), as the official
    SDKs do: plain http goes to the proxy with the absolute URL as request target; https is
    tunnelled with CONNECT and TLS runs end to end inside the tunnel. Either way the proxy is
    met only while connecting, so the per-request path is the same as without one."""

    def __init__(self, origin: Origin, *, max_connections: int, timeouts: Timeouts,
                 ssl_context: ssl.SSLContext | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        self.origin = origin
        self.timeouts = timeouts
        self._ssl = (ssl_context or default_ssl_context()) if origin.scheme == "https" else None
        self._proxy_error: str | None = None
        try:
            self.proxy = proxy_for(origin, environ)
        except ValueError as exc:       # every request then fails with this, instead of going direct
            self.proxy, self._proxy_error = None, str(exc)
        self._idle: deque[_Connection] = deque()
        self._slots = asyncio.Semaphore(max_connections)
        self._open: set[_Connection] = set()
        self._closed = False
        self._arrivals: _Arrivals | None = None     # of the loop the connections run on
        self.connections_opened = 0

    def request_head(self, method: str, path: str, headers: dict[str, str]) -> bytes:
        """`build_head` for this transport's route: through a proxy, plain http names the whole
        URL in the request line and carries the proxy's credentials."""
        proxy = self.proxy
        if proxy is None or self.origin.scheme == "https":
            return build_head(method, path, self.origin, headers)
        if proxy.authorization:
            headers = {**headers, "proxy-authorization": proxy.authorization}
        return build_head(method, f"http://{self.origin.host_header}{path}", self.origin, headers)

    async def _connect(self, deadline_ns: int) -> _Connection:
        if self._proxy_error is not None:
            raise TransportError("connection", self._proxy_error, before_response=True)
        loop = asyncio.get_running_loop()
        if self._arrivals is None or self._arrivals.loop is not loop:
            self._arrivals = _Arrivals(loop)
        arrivals = self._arrivals
        budget = min(self.timeouts.connect, max((deadline_ns - perf_counter_ns()) / 1e9, 0.001))
        origin = self.origin
        proxy = self.proxy
        hop = proxy.origin if proxy is not None else origin      # where the TCP connection goes
        direct_tls = self._ssl if proxy is None else None
        t0 = perf_counter_ns()
        stage = f"connect to {hop.host}:{hop.port}" + (" (the proxy)" if proxy is not None else "")
        try:
            async with asyncio.timeout(budget):
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop, arrivals), hop.host, hop.port, ssl=direct_tls,
                    server_hostname=origin.host if direct_tls else None)
                if proxy is not None:
                    conn.proxy_connect_ns = perf_counter_ns() - t0
                    if self._ssl is not None:
                        stage = f"CONNECT {origin.authority} through the proxy {proxy.address}"
                        await self._tunnel(conn, proxy)
                        stage = f"TLS handshake with {origin.host}:{origin.port} through the proxy"
                        assert conn.transport is not None  # the tunnel is open
                        conn.transport = await loop.start_tls(
                            conn.transport, conn, self._ssl, server_hostname=origin.host)
        except TimeoutError:
            raise TransportError("timeout", f"connect timeout after {budget:g}s: {stage}",
                                 before_response=True) from None
        except ssl.SSLError as exc:
            raise TransportError("connection", f"TLS handshake with {origin.host}:{origin.port} "
                                 f"failed: {exc}", before_response=True) from None
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise TransportError("connection", f"{stage} failed: {reason}", before_response=True) from None
        conn.connected_ns = perf_counter_ns()
        conn.connect_ns = conn.connected_ns - t0
        self.connections_opened += 1
        self._open.add(conn)
        return conn

    async def _tunnel(self, conn: _Connection, proxy: Proxy) -> None:
        """CONNECT through the proxy; returns once it answered 2xx (the tunnel is open)."""
        t0 = perf_counter_ns()
        target = self.origin.authority
        lines = [f"CONNECT {target} HTTP/1.1", f"host: {target}", f"user-agent: {_USER_AGENT}"]
        if proxy.authorization:
            lines.append(f"proxy-authorization: {proxy.authorization}")
        await conn.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        buf = conn.buf
        while (end := buf.find(b"\r\n\r\n")) < 0:
            if conn.error is not None or conn.eof or len(buf) > _MAX_HEAD:
                conn.close()
                raise TransportError("connection", f"the proxy {proxy.address} closed the connection "
                                     f"instead of answering CONNECT {target}", before_response=True)
            await conn.wait()
        status_line = bytes(buf[:buf.find(b"\r\n")]).decode("latin-1", "replace")
        del buf[:end + 4]
        code = status_line.split(" ", 2)[1] if status_line.count(" ") >= 1 else ""
        if not (code.isdigit() and 200 <= int(code) < 300):
            conn.close()
            raise TransportError("connection", f"the proxy {proxy.address} refused CONNECT {target}: "
                                 f"{status_line[:200]!r}", before_response=True)
        conn.tunnel_ns = perf_counter_ns() - t0

    def _take_idle(self) -> _Connection | None:
        idle = self._idle
        while idle:
            conn = idle.pop()                 # LIFO: the most recently used is least likely stale
            if conn.usable:
                return conn
            self._discard(conn)
        return None

    def _discard(self, conn: _Connection) -> None:
        conn.close()
        self._open.discard(conn)

    def _release(self, reusable: _Connection | None, conn: _Connection) -> None:
        if reusable is not None and not self._closed:
            self._idle.append(reusable)
        else:
            self._discard(conn)
        self._slots.release()

    async def send(self, head: bytes, body: bytes, *, method: str = "POST",
                   not_before_ns: int | None = None) -> Response:
        """Write one request (`head` from `build_head`, then Content-Length and `body`) and read
        the response head. The returned Response owns a pool slot until `aclose()`.

        With `not_before_ns` (perf_counter_ns), a request ready before then (slot taken, connection
        open, bytes encoded) is written by a loop timer at that moment, never earlier: an open loop
        prepares each request a little ahead, and the write does not wait for the task's next step
        behind whatever else the loop has queued (`_write_when_due`).

        Timestamps: `start_ns`/`started_at` are taken just before the request bytes are written
        (after any wait for a slot and any connect); `headers_ns` when the head was complete;
        `first_byte_ns` when the first body byte arrived. Raises TransportError."""
        if self._closed:
            raise TransportError("connection", "transport is closed", before_response=True)
        slots = self._slots
        pool_wait_ns = 0
        if slots.locked():
            t0 = perf_counter_ns()
            await slots.acquire()
            pool_wait_ns = perf_counter_ns() - t0
        else:
            await slots.acquire()
        message = b"%scontent-length: %d\r\n\r\n%s" % (head, len(body), body)
        timeouts = self.timeouts
        try:
            deadline_ns = perf_counter_ns() + int(timeouts.total * 1e9)
            conn = self._take_idle()
            while True:
                reused = conn is not None
                if conn is None:
                    conn = await self._connect(deadline_ns)
                response = Response(conn, self, reused=reused)
                response.pool_wait_ns = pool_wait_ns
                try:
                    if not_before_ns is not None and perf_counter_ns() < not_before_ns:
                        await _write_when_due(conn, response, message, not_before_ns, timeouts, deadline_ns)
                    else:
                        _write_now(conn, response, message, timeouts, deadline_ns)
                    await conn.writable()
                    await response._read_head(method)
                except TransportError as exc:
                    self._discard(conn)
                    if reused and exc.before_response:
                        conn = None          # the server had dropped the idle connection: once more
                        continue
                    if response.start_ns:
                        exc.written_ns, exc.written_at = response.start_ns, response.started_at
                    raise
                except BaseException:
                    self._discard(conn)
                    raise
                break
        except BaseException:
            slots.release()
            raise
        if response.complete:
            response._release()
        return response

    async def aclose(self) -> None:
        self._closed = True
        while self._idle:
            self._discard(self._idle.pop())
        for conn in list(self._open):
            conn.close()
        self._open.clear()


async def unreachable_reason(url: str, timeout: float) -> str | None:
    """None if a TCP connection to the URL's host opens; otherwise why not. Lets the runner refuse
    a run up front (exit 3) instead of storing a run's worth of connection errors."""
    try:
        origin, _ = split_url(url)
        proxy = proxy_for(origin)
    except ValueError as exc:
        return str(exc)
    hop = proxy.origin if proxy is not None else origin      # through a proxy, the proxy must answer
    via = f" (the proxy for {origin.authority})" if proxy is not None else ""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(hop.host, hop.port), timeout)
    except (TimeoutError, OSError) as exc:
        return f"cannot connect to {hop.host}:{hop.port}{via} ({type(exc).__name__}: {exc or 'timed out'})"
    writer.close()
    return None
