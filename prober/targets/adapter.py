"""What both protocol adapters share: sending over the transport, reading streamed, plain and
error responses into an Exchange, and dropping sampling parameters an endpoint rejects.

A protocol adapter supplies the request body (`build_body`), the auth headers, a `StreamDecoder`
for its SSE events and `parse_body` for a non-streamed response. Decoders are pure: they take
(event name, data, arrival time) and fill the Exchange, so the wire samples are tested through
exactly the code that handles live streams.
"""

from __future__ import annotations

import json
import json.scanner
import re
import traceback
from collections.abc import Awaitable, Callable
from time import perf_counter_ns
from typing import Any, ClassVar

from prober.core.config import TargetConfig
from prober.core.records import (
    KEPT_HEADER_PREFIXES,
    KEPT_HEADERS,
    ChatRequest,
    Exchange,
    Protocol,
    utcnow,
)
from prober.targets.base import TargetAdapter
from prober.targets.errors import classify_error, is_error_body
from prober.targets.sse import SSEParser
from prober.targets.transport import (
    HTTPTransport,
    Response,
    TransportError,
    split_url,
)

_KEPT = frozenset(KEPT_HEADERS)
_SECRET_HEADERS = ("x-api-key", "authorization")
_ERROR_BODY_LIMIT = 1 << 20
_DRAIN_GRACE = 1.0        # seconds to wait for the end of the body after the terminal event


# The C scanner takes the decoder as its context; typeshed types the argument as the scanner class.
_scan_json = json.scanner.make_scanner(json.JSONDecoder())   # type: ignore[arg-type]


def parse_json(text: str) -> Any:
    """json.loads without its per-call Python layers (this runs once per streamed event); anything
    unusual (surrounding whitespace, invalid JSON) goes through json.loads for its exact verdict."""
    try:
        obj, end = _scan_json(text, 0)
    except StopIteration:
        return json.loads(text)
    if end != len(text):
        return json.loads(text)
    return obj


def kept_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k in _KEPT or k.startswith(KEPT_HEADER_PREFIXES)}


def merge_extra(body: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` merged last; nested objects are merged key by key (so that extra
    {"stream_options": {"include_obfuscation": false}} keeps include_usage)."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(body.get(key), dict):
            body[key] = merge_extra(dict(body[key]), value)
        else:
            body[key] = value
    return body


def tool_call_record(kind: str, call_id: Any, name: Any, raw: str | None,
                     parsed: Any = None) -> dict[str, Any]:
    """One tool call, the same shape for both protocols: {"type", "id", "name", "input"}.
    `input` is the parsed JSON, or the raw text with "parse_error": True when it does not parse."""
    record: dict[str, Any] = {"type": kind, "id": call_id, "name": name}
    if raw is None or raw == "":
        record["input"] = parsed if parsed is not None else {}
        return record
    try:
        record["input"] = json.loads(raw)
    except ValueError:
        record["input"] = raw
        record["parse_error"] = True
    return record


def mentioned_param(message: str, candidates: dict[str, str]) -> str | None:
    """The sampling parameter an error message names first. `candidates` maps each name a
    message might use (the wire name and the probe's name) to the probe's name."""
    best: tuple[int, str] | None = None
    for spelled, name in candidates.items():
        match = re.search(rf"(?<![A-Za-z0-9_]){re.escape(spelled)}(?![A-Za-z0-9_])", message)
        if match and (best is None or match.start() < best[0]):
            best = (match.start(), name)
    return best[1] if best else None


class StreamDecoder:
    """Turns one stream's SSE events into Exchange fields. `done` once the terminal event (or an
    error event, or an undecodable one) has been seen; `finish()` assembles text and tool calls."""

    def __init__(self, exchange: Exchange) -> None:
        self.ex = exchange
        self.done = False
        self.end_ns: int | None = None
        self._text: list[str] = []

    def feed(self, event: str | None, data: str, ns: int) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        self.ex.text = "".join(self._text)

    terminal_name: ClassVar[str] = "the terminal event"

    def _decode(self, event: str | None, data: str, ns: int) -> dict[str, Any] | None:
        # raw_events keeps the data text, not the parsed object: strings are invisible to the
        # cyclic garbage collector, while hundreds of in-flight streams' parsed dicts made its
        # full collections stall the event loop for tens of milliseconds.
        self.ex.raw_events.append((event, data))
        try:
            obj = parse_json(data)
        except ValueError:
            self._fail("protocol", f"undecodable JSON in SSE event {event or 'message'}: {data[:200]!r}", ns)
            return None
        if not isinstance(obj, dict):
            self._fail("protocol", f"SSE event data is not a JSON object: {data[:200]!r}", ns)
            return None
        return obj

    def _content(self, ns: int, chars: int, answer: bool = True) -> None:
        """A content-bearing chunk; `answer` False for the reasoning channel (thinking, reasoning
        content), which opens TTFT but not the answer's TTFT (docs/measurements-definitions.md)."""
        ex = self.ex
        if ex.first_token_ns is None:
            ex.first_token_ns = ns
        if answer and ex.first_answer_ns is None:
            ex.first_answer_ns = ns
        ex.chunk_ns.append(ns)
        ex.chunk_chars.append(chars)

    def _fail(self, error_type: str, message: str, ns: int) -> None:
        if self.ex.error_type is None:
            self.ex.error_type = error_type
            self.ex.error_message = message
        self.done = True
        self.end_ns = ns

    def _error_event(self, obj: dict[str, Any], ns: int) -> None:
        error_type, message = classify_error(200, obj)
        self._fail(error_type, f"error event after HTTP 200: {message}", ns)


class HTTPAdapter(TargetAdapter):
    protocol: ClassVar[Protocol]
    endpoint: ClassVar[str]                    # path after .../v1
    decoder: ClassVar[type[StreamDecoder]]
    # Probe-side sampling names spelled differently on this protocol's wire.
    wire_names: ClassVar[dict[str, str]] = {}
    writes_on_schedule: ClassVar[bool] = True

    def __init__(self, target: TargetConfig, base_url: str, api_key: str | None) -> None:
        super().__init__(target, base_url, api_key)
        origin, path = split_url(self.base_url)
        self._prefix = path if path.endswith("/v1") else f"{path}/v1"
        self.url = f"{origin.scheme}://{origin.host_header}{self._prefix}{self.endpoint}"
        self._transport = HTTPTransport(origin, max_connections=target.max_concurrency,
                                        timeouts=target.timeouts)
        headers = {"content-type": "application/json", **self._protocol_headers(api_key),
                   **target.headers, **target.env_headers()}
        self._heads: dict[bool, bytes] = {}
        self._shown_headers: dict[bool, dict[str, str]] = {}
        for stream in (True, False):
            full = {**headers, "accept": "text/event-stream" if stream else "application/json"}
            self._heads[stream] = self._transport.request_head("POST", self._prefix + self.endpoint, full)
            self._shown_headers[stream] = {
                k: ("[redacted]" if k.lower() in _SECRET_HEADERS else v) for k, v in full.items()}
        self._headers = headers
        self.rejected: set[str] = set()        # sampling parameters this endpoint refused

    # protocol hooks -----------------------------------------------------------------------------
    def _protocol_headers(self, api_key: str | None) -> dict[str, str]:
        raise NotImplementedError

    def build_body(self, request: ChatRequest, skip: frozenset[str] | set[str] = frozenset()
                   ) -> tuple[dict[str, Any], list[str]]:
        """The request body, leaving out the sampling parameters in `skip`; plus notes for
        things that could not be expressed on this protocol."""
        raise NotImplementedError

    def parse_body(self, ex: Exchange, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def _sampling(self, request: ChatRequest, skip: frozenset[str] | set[str]) -> dict[str, Any]:
        out = {}
        for name, value in request.sampling.items():
            if name in skip:
                continue
            wire = self.wire_names.get(name, name)
            if wire == "stop_sequences" and isinstance(value, str):
                value = [value]
            out[wire] = value
        return out

    # sending ------------------------------------------------------------------------------------
    async def send(self, request: ChatRequest, attempt: int = 1,
                   before_resend: Callable[[Exchange], Awaitable[None]] | None = None, *,
                   not_before_ns: int | None = None) -> Exchange:
        """Send `request`; where the endpoint refuses a parameter (or the body's shape) in a way
        a changed body avoids, change it and send again. Each refused attempt is its own
        Exchange: `before_resend(refused)` is awaited before every resend, so that the caller can
        store it and charge the resend to the budget and the rate limit (it may raise to stop).
        The first attempt is written no earlier than `not_before_ns` (HTTPTransport.send)."""
        skipped = [name for name in request.sampling if name in self.rejected]
        skip = set(skipped)
        rejected_now: list[tuple[str, str]] = []
        reshaped: list[str] = []
        while True:
            body, notes = self.build_body(request, skip)
            ex = await self._exchange(body, request.stream, attempt, not_before_ns)
            not_before_ns = None        # a resend goes as soon as the refusal is handled
            ex.extra.update(request.stored_extra)
            name = self._rejected_param(ex, request, skip)
            if name is not None:
                skip.add(name)
                self.rejected.add(name)
                rejected_now.append((name, ex.error_message or ""))
                ex.findings.append(f"parameter {name} rejected: resent without it")
            else:
                change = self._reshape_after(ex)
                if change is None:
                    break
                reshaped.append(change)
                ex.findings.append(change)
            if before_resend is not None:
                await before_resend(ex)
            attempt += 1
        ex.rejected_params = skipped + [name for name, _ in rejected_now]
        ex.findings.extend(notes)
        ex.findings.extend(f"parameter {name} not sent: rejected earlier by this endpoint"
                           for name in skipped)
        ex.findings.extend(f"parameter {name} rejected, resent without it: {message}"
                           for name, message in rejected_now)
        ex.findings.extend(reshaped)
        return ex

    def _reshape_after(self, ex: Exchange) -> str | None:
        """Protocol hook: when `ex` is a refusal that a differently shaped body avoids (and the
        adapter has switched to that shape for this and later requests), a finding saying so;
        None to keep the answer as it is."""
        return None

    def _rejected_param(self, ex: Exchange, request: ChatRequest, skip: set[str]) -> str | None:
        if ex.status not in (400, 422) or not ex.error_message:
            return None
        candidates = {}
        for name in request.sampling:
            if name not in skip:
                candidates[name] = name
                candidates[self.wire_names.get(name, name)] = name
        return mentioned_param(ex.error_message, candidates) if candidates else None

    async def _exchange(self, body: dict[str, Any], stream: bool, attempt: int,
                        not_before_ns: int | None = None) -> Exchange:
        ex = Exchange(protocol=self.protocol, url=self.url, request_body=body,
                      request_headers=dict(self._shown_headers[stream]), started_at=utcnow(),
                      start_ns=perf_counter_ns(), stream=stream, attempt=attempt)
        payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        try:
            response = await self._transport.send(self._heads[stream], payload, not_before_ns=not_before_ns)
        except Exception as exc:
            ex.end_ns = perf_counter_ns()
            ex.error_type, ex.error_message = classify_error(exc=exc)
            if isinstance(exc, TransportError) and exc.written_ns is not None:
                # Written, then failed before the response head: timed from the write, as an
                # answered request is (a request prepared ahead was written later than this
                # Exchange was made, when it was due).
                ex.start_ns, ex.started_at = exc.written_ns, exc.written_at or ex.started_at
            return ex
        try:
            self._take_head(ex, response)
            if not 200 <= response.status < 300:
                await self._read_error(ex, response)
            elif stream and "event-stream" in response.headers.get("content-type", "event-stream"):
                await self._read_stream(ex, response)
            else:
                await self._read_body(ex, response)
        except Exception as exc:
            if ex.error_type is None:
                ex.error_type, ex.error_message = classify_error(exc=exc)
                if ex.error_type == "internal":   # kept with the sample for the bug report
                    ex.extra["traceback"] = "".join(traceback.format_exception(exc))
            if ex.end_ns is None:
                ex.end_ns = perf_counter_ns()
        finally:
            await response.aclose()
        ex.first_byte_ns = response.first_byte_ns
        return ex

    def _take_head(self, ex: Exchange, response: Response) -> None:
        ex.started_at = response.started_at or ex.started_at
        ex.start_ns = response.start_ns
        ex.status = response.status
        ex.headers_ns = response.headers_ns
        headers = response.headers
        ex.response_headers = kept_headers(headers)
        ex.request_id = headers.get("request-id") or headers.get("x-request-id")
        if response.connect_ns is not None:
            ex.extra["connect_ms"] = round(response.connect_ns / 1e6, 3)
            ex.connected_ns = response.connected_ns
            if response.proxy_connect_ns is not None:
                # Through a proxy: which one (never its credentials), and its share of connect_ms.
                ex.extra["proxy"] = self._transport.proxy.address       # type: ignore[union-attr]
                ex.extra["proxy_connect_ms"] = round(response.proxy_connect_ns / 1e6, 3)
                if response.tunnel_ns is not None:
                    ex.extra["proxy_tunnel_ms"] = round(response.tunnel_ns / 1e6, 3)
        if response.pool_wait_ns:
            ex.extra["pool_wait_ms"] = round(response.pool_wait_ns / 1e6, 3)

    async def _read_stream(self, ex: Exchange, response: Response) -> None:
        decoder = self.decoder(ex)
        parser = SSEParser()
        feed_parser = parser.feed
        feed_decoder = decoder.feed

        def on_data(data: bytes, ns: int) -> bool:
            for event, payload in feed_parser(data):
                feed_decoder(event, payload, ns)
                if decoder.done:
                    return True
            return False

        try:
            await response.stream(on_data)
        except TransportError as exc:
            ex.end_ns = perf_counter_ns()
            ex.error_type, ex.error_message = classify_error(exc=exc)
        else:
            if decoder.done:
                ex.end_ns = decoder.end_ns
                await response.drain(min(_DRAIN_GRACE, self.target.timeouts.read))
            else:
                ex.end_ns = response.end_ns or perf_counter_ns()
                cut = " (cut inside an event)" if parser.pending else ""
                ex.error_type = "protocol"
                ex.error_message = f"stream ended without {decoder.terminal_name}{cut}"
        finally:
            if parser.comments:
                ex.extra["sse_comments"] = parser.comments
            decoder.finish()

    async def _read_body(self, ex: Exchange, response: Response) -> None:
        raw = await response.read()
        ex.end_ns = response.end_ns
        if ex.stream:
            ex.findings.append("stream requested but the response was not an event stream "
                               f"(content-type {response.headers.get('content-type')!r})")
        text = raw.decode("utf-8", "replace")
        ex.raw_events.append((None, text))
        try:
            body = json.loads(text)
        except ValueError:
            ex.error_type = "protocol"
            ex.error_message = f"undecodable JSON body: {raw[:200]!r}"
            return
        if not isinstance(body, dict):
            ex.error_type, ex.error_message = "protocol", f"response body is not a JSON object: {raw[:200]!r}"
        elif is_error_body(body):
            ex.error_type, ex.error_message = classify_error(200, body)
        else:
            self.parse_body(ex, body)

    async def _read_error(self, ex: Exchange, response: Response) -> None:
        raw = await response.read(_ERROR_BODY_LIMIT)
        ex.end_ns = response.end_ns or perf_counter_ns()
        body: Any = raw.decode("utf-8", "replace")
        ex.raw_events.append((None, body))
        try:
            body = json.loads(body)
        except ValueError:
            body = body.strip()
        else:
            if ex.request_id is None and isinstance(body, dict) and isinstance(body.get("request_id"), str):
                ex.request_id = body["request_id"]
        ex.error_type, ex.error_message = classify_error(response.status, body)

    async def aclose(self) -> None:
        await self._transport.aclose()
