"""The ProbeContext a probe runs in: one target, one suite entry.

Every request a probe sends passes through `TargetSession.send`, which applies, in order: the
run budget, the target's concurrency cap and rate limit, the adapter, storage of the attempt, and
retries with backoff. Probes see only the final attempt; the store sees all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from asyncio_throttle.throttler import Throttler
from rich.progress import TaskID

from prober.core.config import RunnerConfig, TargetConfig
from prober.core.records import ChatRequest, Exchange, Sample
from prober.run.budget import BudgetExhausted, RunBudget
from prober.run.progress import RunProgress
from prober.run.retry import retry_delay, should_retry
from prober.run.sample_writer import SampleWriterProcess
from prober.targets.base import TargetAdapter

# The progress task that requests sent in this asyncio context count towards (see progress_task);
# tasks a probe starts inside the block inherit it.
_progress_task: contextvars.ContextVar[TaskID | None] = contextvars.ContextVar("prober_progress_task", default=None)

# How far ahead of its due time an open loop starts a request whose adapter writes on schedule
# (TargetAdapter.writes_on_schedule): its task's first step, the budget, the body and a new
# connection's connect fit in it, and a loop timer writes the bytes when due. A request holds its
# slot under max_concurrency from then, at most this much longer than it would otherwise.
SEND_LEAD_NS = 5_000_000


def send_lag_ns(start_ns: int, ready_ns: int, connect_ns: int, connected_ns: int | None) -> int:
    """What the client added to an open-loop request's send: its write time minus when it was
    ready to go (due, or the end of its wait for the cap), less the part of a new connection's
    connect (and TLS handshake) after that moment, which is the network's round trips. A connect
    that ended before the request was due (opened ahead of it) leaves nothing out. Without the
    connect's end, it is taken to end at the write. Never negative: a request prepared ahead that
    failed before it was written (its connect refused) was not late."""
    connected = start_ns if connected_ns is None else connected_ns
    connect_after_ready = max(0, connected - max(ready_ns, connected - connect_ns))
    return max(0, start_ns - ready_ns - connect_after_ready)


@dataclass
class LoopWindow:
    """A closed or open loop's time span, so the client's event-loop lag can be attributed to it."""

    labels: dict[str, Any]
    start_ns: int
    end_ns: int


@dataclass
class TargetGate:
    """Per-target limits shared by every probe that runs against the target in one run."""

    semaphore: asyncio.Semaphore
    throttler: Throttler | None

    @classmethod
    def for_target(cls, target: TargetConfig) -> TargetGate:
        throttler = None
        if target.requests_per_second:
            # asyncio-throttle counts whole requests per period; a fractional rate becomes a longer period.
            rate = max(1, int(target.requests_per_second))
            throttler = Throttler(rate_limit=rate, period=rate / target.requests_per_second)
        return cls(asyncio.Semaphore(target.max_concurrency), throttler)


class _TimedLauncher:
    """Starts an open loop's requests from loop timers: each timer starts the request it was set
    for and every other one already due, in a task whose first step runs in the loop turn after
    the timer's (a sleeping coroutine that created the task would add a turn, and at a few hundred
    requests a second a turn can take milliseconds). Where the adapter writes on schedule, the
    launch is SEND_LEAD_NS ahead and another timer writes the request when due
    (transport._write_when_due): that first step waits behind the callbacks the loop has queued,
    a timer does not (uvloop runs due timers first; asyncio right after a turn's I/O callbacks).
    Otherwise the launch is when due and the first step writes it (Python 3.11 has no eager tasks).

    Due times are perf_counter_ns, not the loop's clock: uvloop's ticks in whole milliseconds, and
    its timers fire up to a millisecond early or late. A timer that fires early finds nothing due
    and is set again for what is left.

    No reference cycle outlives it (its pending timer is its only link back to itself), so the
    level's tasks and exchanges are freed as soon as they are dropped, not by a collection that
    stops the loop (a level of 3,200 requests left 55k objects to one: 60-80 ms)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, due: list[tuple[int, int]],
                 launch: Callable[[int], None]) -> None:
        self._loop = loop
        self._due = due                   # (perf_counter_ns, request index), in time order
        self._launch = launch
        self._next = 0
        self._timer: asyncio.TimerHandle | None = None
        self.all_launched: asyncio.Future[None] = loop.create_future()

    def fire(self) -> None:
        self._timer = None
        now = time.perf_counter_ns()
        due = self._due
        while self._next < len(due) and due[self._next][0] <= now:
            self._launch(due[self._next][1])
            self._next += 1
        if self._next < len(due):
            wait_ns = due[self._next][0] - time.perf_counter_ns()
            self._timer = self._loop.call_later(max(wait_ns, 0) / 1e9, self.fire)
        elif not self.all_launched.done():
            self.all_launched.set_result(None)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


@dataclass
class TargetSession:
    run_id: str
    target: TargetConfig
    adapter: TargetAdapter
    gate: TargetGate
    probe_name: str
    budget: RunBudget
    writer: SampleWriterProcess
    settings: RunnerConfig
    progress: RunProgress
    request_counter: itertools.count[int]
    entry: str | None = None   # the suite entry this session runs; stamped on every sample
    windows: list[LoopWindow] = field(default_factory=list)

    async def send(self, request: ChatRequest, *, case: str, labels: dict[str, Any]) -> Exchange:
        return await self._send(request, case=case, labels=labels)

    async def _send(self, request: ChatRequest, *, case: str, labels: dict[str, Any],
                    annotate: Callable[[Exchange], None] | None = None,
                    not_before_ns: int | None = None) -> Exchange:
        """`send`; `annotate` sees every attempt before it is stored (open loops add their schedule).
        With `not_before_ns`, the adapter (one that writes on schedule) writes the first try then."""
        request_index = next(self.request_counter)
        attempt = 1          # every attempt on the wire, resends after a refused parameter included
        tries = 1            # what the retry policy counts: resends are not retries

        async def before_resend(refused: Exchange) -> None:
            # A resend after a refused parameter is an attempt like any other: stored, and charged
            # to the budget and the rate limit before it goes out.
            self.budget.record(refused)
            try:
                self.budget.reserve_request()
            except BudgetExhausted:
                store(refused, final=True)
                raise
            store(refused, final=False)
            await self._throttle()

        def store(exchange: Exchange, *, final: bool) -> None:
            if annotate is not None:
                annotate(exchange)
            self.writer.put(Sample(run_id=self.run_id, target=self.target.name, probe=self.probe_name,
                                 case=case, labels=labels, exchange=exchange,
                                 request_index=request_index, final=final, entry=self.entry))

        while True:
            self.budget.reserve_request()
            async with self.gate.semaphore:
                await self._throttle()
                if not_before_ns is None:
                    exchange = await self.adapter.send(request, attempt=attempt, before_resend=before_resend)
                else:       # only an adapter that writes on schedule takes not_before_ns (open_loop)
                    exchange = await self.adapter.send(request, attempt=attempt, before_resend=before_resend,
                                                       not_before_ns=not_before_ns)   # type: ignore[call-arg]
                    not_before_ns = None           # a retry goes after its backoff
            self.budget.record(exchange)
            delay = None
            if should_retry(exchange, tries, self.settings.max_retries):
                delay = retry_delay(tries, exchange.response_headers, base=self.settings.backoff_base,
                                    cap=self.settings.backoff_max, retry_after_max=self.settings.retry_after_max)
            store(exchange, final=delay is None)
            if delay is None:
                task_id = _progress_task.get()
                if task_id is not None:
                    self.progress.advance(task_id, failed=not exchange.ok)
                return exchange
            self.progress.note_retry()
            await asyncio.sleep(delay)
            tries += 1
            attempt = exchange.attempt + 1

    async def _throttle(self) -> None:
        if self.gate.throttler is not None:
            async with self.gate.throttler:
                pass

    async def count_tokens(self, request: ChatRequest) -> int | None:
        """Input tokens of `request` as the endpoint counts them (Anthropic's count_tokens route);
        None where it cannot. Not a sample: counting is free and produces no Exchange, but it still
        waits for the target's concurrency cap and rate limit."""
        async with self.gate.semaphore:
            await self._throttle()
            return await self.adapter.count_tokens(request)

    @contextlib.contextmanager
    def progress_task(self, title: str, total: int | None = None) -> Iterator[None]:
        task_id = self.progress.start_task(f"{self.target.name} {title}", total)
        token = _progress_task.set(task_id)
        try:
            yield
        finally:
            _progress_task.reset(token)
            self.progress.finish_task(task_id)

    async def closed_loop(self, *, concurrency: int, count: int, make_request: Callable[[int], ChatRequest],
                          case: str, labels: dict[str, Any], title: str) -> list[Exchange]:
        results: list[Exchange | None] = [None] * count
        next_index = itertools.count()

        async def worker() -> None:
            while (i := next(next_index)) < count:
                results[i] = await self.send(make_request(i), case=case, labels=labels)

        start = time.perf_counter_ns()
        with self.progress_task(title, count):
            workers = [asyncio.create_task(worker()) for _ in range(max(1, min(concurrency, count)))]
            try:
                await asyncio.gather(*workers)
            finally:
                for task in workers:
                    task.cancel()
        self.windows.append(LoopWindow(labels=labels, start_ns=start, end_ns=time.perf_counter_ns()))
        return [r for r in results if r is not None]

    async def open_loop(self, *, offsets_s: Sequence[float], make_request: Callable[[int], ChatRequest],
                        max_concurrency: int | None, case: str, labels: dict[str, Any],
                        title: str) -> list[Exchange]:
        """Request i is sent at the loop's start + offsets_s[i], whether or not earlier ones finished
        (an open loop does not slow down when the server does, so queueing shows). Beyond
        `max_concurrency` in flight a request waits for one to finish. Every attempt's `extra`
        gets `scheduled_offset_ms`, `send_lag_ms` (send_lag_ns of its first attempt: what the
        client itself added to when it was due, the schedule or the end of its wait for the cap),
        `inflight_at_send` (requests in flight then, itself included) and, where it waited for
        the cap, `concurrency_wait_ms`. Returns the final attempts in index order.

        Where the adapter writes on schedule, a request starts SEND_LEAD_NS before it is due and
        its bytes are written when due by a loop timer; otherwise it starts when due."""
        count = len(offsets_s)
        results: list[Exchange | None] = [None] * count
        cap = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        in_flight = 0
        lead_ns = SEND_LEAD_NS if self.adapter.writes_on_schedule else 0

        async def one(i: int, due_ns: int) -> None:
            nonlocal in_flight
            ready_ns = due_ns
            extra: dict[str, Any] = {"scheduled_offset_ms": round(offsets_s[i] * 1000, 3)}
            if cap is not None:
                # Only a wait the cap imposed moves the time the request was due; a late start
                # with a free slot is the client's own lag and stays in send_lag_ms.
                waits = cap.locked()
                await cap.acquire()
                if waits:
                    ready_ns = max(due_ns, time.perf_counter_ns())
                    extra["concurrency_wait_ms"] = round((ready_ns - due_ns) / 1e6, 3)
            in_flight += 1
            extra["inflight_at_send"] = in_flight
            first_lag_ns: list[int] = []

            def annotate(exchange: Exchange) -> None:
                if not first_lag_ns:
                    connect_ns = round(float(exchange.extra.get("connect_ms") or 0.0) * 1e6)
                    first_lag_ns.append(send_lag_ns(exchange.start_ns, ready_ns, connect_ns, exchange.connected_ns))
                exchange.extra.update(extra, send_lag_ms=round(first_lag_ns[0] / 1e6, 3))

            try:
                results[i] = await self._send(make_request(i), case=case, labels=labels, annotate=annotate,
                                              not_before_ns=due_ns if lead_ns else None)
            finally:
                in_flight -= 1
                if cap is not None:
                    cap.release()

        tasks: list[asyncio.Task[None]] = []
        loop = asyncio.get_running_loop()
        start = time.perf_counter_ns()
        due_ns = [start + round(offset * 1e9) for offset in offsets_s]

        def launch(i: int) -> None:
            tasks.append(loop.create_task(one(i, due_ns[i])))

        launcher = _TimedLauncher(loop, sorted((due - lead_ns, i) for i, due in enumerate(due_ns)), launch)
        with self.progress_task(title, count):
            try:
                launcher.fire()
                await launcher.all_launched
                await asyncio.gather(*tasks)
            finally:
                launcher.cancel()
                for task in tasks:
                    task.cancel()
        self.windows.append(LoopWindow(labels=labels, start_ns=start, end_ns=time.perf_counter_ns()))
        return [r for r in results if r is not None]
