"""Slots, the response timeline and its playback at absolute deadlines.

Timing model, per request (all on the event loop's monotonic clock):

    arrival -> queue (FIFO, for a free slot) -> slot granted at `start`
    start: response head sent (streams: plus the protocol's preamble events)
    first token at start + first_token_delay + prefill, then one token every 1/decode rate
    the slot is held until the last token's deadline, then handed straight to the next waiter

Every write is scheduled at an absolute deadline computed from `start` (never "sleep this long
after the previous write"), and a slot is handed over at the releasing request's scheduled time,
so lateness under load shows up as lateness but never accumulates.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from prober.emulator.faults import MID_STREAM_ERROR
from prober.emulator.plan import ErrorKind, ResponsePlan
from prober.emulator.server import LAST_CHUNK, chunk, full_response, response_head

Headers = list[tuple[str, str]]


class Slots:
    """`count` slots; waiters are served strictly first come, first served."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.active = 0
        self._waiters: deque[asyncio.Future[float]] = deque()

    @property
    def queued(self) -> int:
        return len(self._waiters)

    async def acquire(self, now: float) -> float:
        """Wait for a slot; returns the loop time the slot became this request's."""
        if self.active < self.count and not self._waiters:
            self.active += 1
            return now
        waiter: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if not waiter.cancelled():                 # granted, then cancelled: pass it on
                self.release(asyncio.get_running_loop().time())
            elif waiter in self._waiters:              # release() drops cancelled waiters itself
                self._waiters.remove(waiter)
            raise

    def release(self, at: float) -> None:
        """Give the slot up as of loop time `at`; the next waiter's service starts then."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(at)
                return
        self.active -= 1


class WireEncoder(Protocol):
    """What a protocol module renders for one request (see anthropic_wire, openai_wire)."""

    def stream_headers(self) -> Headers: ...
    def json_headers(self) -> Headers: ...
    def preamble(self) -> bytes: ...
    def token(self, text: str) -> bytes: ...
    def malformed(self) -> bytes: ...
    def stream_error(self, kind: ErrorKind) -> bytes: ...
    def epilogue(self) -> bytes: ...
    def message(self) -> bytes: ...
    def error(self, kind: ErrorKind) -> tuple[int, Headers, bytes]: ...


@dataclass
class Frame:
    at: float                 # loop-time deadline
    data: bytes
    tokens: int = 0           # content tokens carried (a non-streaming body carries them all)
    close: bool = False       # close the connection after writing


def first_token_at(plan: ResponsePlan, start: float) -> float:
    return start + plan.first_token_delay_s + plan.prefill_s


def content_due(plan: ResponsePlan, start: float, stream: bool) -> float:
    """When the first content reaches the socket, faults aside: a stream sends its first token
    alone, a plain response sends every token with the last one."""
    first = first_token_at(plan, start)
    return first if stream else first + max(len(plan.tokens) - 1, 0) * plan.token_interval_s


def stream_frames(plan: ResponsePlan, enc: WireEncoder, start: float, keep_alive: bool) -> Iterator[Frame]:
    """A streamed response: head and preamble at `start`, then one frame per token."""
    yield Frame(start, response_head(200, enc.stream_headers(), keep_alive=keep_alive) + chunk(enc.preamble()))
    first = first_token_at(plan, start)
    fault = plan.fault
    n = len(plan.tokens)
    strike = min(fault.after_tokens, max(n - 1, 0)) if fault else -1
    shift = 0.0
    for i, token in enumerate(plan.tokens):
        at = first + i * plan.token_interval_s + shift
        data = b""
        if fault is not None and i == strike:
            if fault.kind == "drop_mid_stream":
                yield Frame(at, b"", close=True)
                return
            if fault.kind == "mid_stream_error":
                yield Frame(at, chunk(enc.stream_error(MID_STREAM_ERROR)) + LAST_CHUNK)
                return
            if fault.kind == "malformed_sse":
                if fault.close_after_malformed:
                    yield Frame(at, chunk(enc.malformed()), close=True)
                    return
                data = chunk(enc.malformed())
            if fault.kind == "stall":
                shift += fault.stall_s
                at += fault.stall_s
        data += chunk(enc.token(token))
        if i == n - 1:
            data += chunk(enc.epilogue()) + LAST_CHUNK
        yield Frame(at, data, tokens=1)
    if n == 0:
        yield Frame(first, chunk(enc.epilogue()) + LAST_CHUNK)


def unary_frames(plan: ResponsePlan, enc: WireEncoder, start: float, keep_alive: bool) -> Iterator[Frame]:
    """A non-streamed response: the whole body at the last token's deadline."""
    first = first_token_at(plan, start)
    n = len(plan.tokens)
    done = content_due(plan, start, stream=False)
    fault = plan.fault
    kind = fault.kind if fault else None
    if fault is not None and kind == "mid_stream_error":
        status, headers, body = enc.error(MID_STREAM_ERROR)
        strike = min(fault.after_tokens, max(n - 1, 0))
        yield Frame(first + strike * plan.token_interval_s, full_response(status, headers, body, keep_alive=keep_alive))
        return
    if fault is not None and kind == "stall":
        done += fault.stall_s
    body = enc.message()
    if kind == "drop_mid_stream":
        head = response_head(200, enc.json_headers(), content_length=len(body), keep_alive=keep_alive)
        yield Frame(done, head + body[:len(body) // 2], close=True)
        return
    if kind == "malformed_sse":
        body = body[:len(body) // 2]
    yield Frame(done, full_response(200, enc.json_headers(), body, keep_alive=keep_alive), tokens=n)


@dataclass
class PlayResult:
    tokens_sent: int = 0
    last_at: float = 0.0          # deadline of the last frame written
    closed: bool = False          # the connection is closed (by a fault or by the client)
    client_gone: bool = False


class Player:
    """Writes frames to a transport at their deadlines, with loop.call_at (no task per token).

    The next frame is built right after the current one is written, so encoding work happens
    between deadlines rather than at them.
    """

    def __init__(self, transport: asyncio.WriteTransport, frames: Iterator[Frame],
                 on_first_token: Callable[[], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._transport = transport
        self._frames = frames
        self._on_first_token = on_first_token
        self._result = PlayResult()
        self._done: asyncio.Future[PlayResult] = self._loop.create_future()
        self._next: Frame | None = None
        self._handle: asyncio.TimerHandle | None = None

    async def play(self) -> PlayResult:
        self._schedule_next()
        try:
            return await self._done
        finally:
            if self._handle is not None:
                self._handle.cancel()

    def _schedule_next(self) -> None:
        self._next = next(self._frames, None)
        if self._next is None:
            self._finish()
        else:
            self._handle = self._loop.call_at(self._next.at, self._step)

    def _step(self) -> None:
        self._handle = None
        frame = self._next
        assert frame is not None               # scheduled only while a frame is pending
        result = self._result
        if self._transport.is_closing():
            result.closed = result.client_gone = True
            self._finish()
            return
        if frame.data:
            self._transport.write(frame.data)
        if frame.tokens:
            if result.tokens_sent == 0:
                self._on_first_token()
            result.tokens_sent += frame.tokens
        result.last_at = frame.at
        if frame.close:
            self._transport.close()
            result.closed = True
            self._finish()
            return
        self._schedule_next()

    def _finish(self) -> None:
        if not self._done.done():
            self._done.set_result(self._result)
