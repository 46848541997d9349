"""`TargetSession.open_loop` launches each request from a loop timer at its due time: never early,
each exactly once, in schedule order, and nothing more once the loop is cancelled; on asyncio's
loop and on uvloop, whose clock ticks in milliseconds and whose timers fire early."""

from __future__ import annotations

import asyncio
import gc
import itertools
import time
import weakref

import pytest
from rich.console import Console

from prober.core.config import Budget, RunnerConfig, TargetConfig
from prober.core.records import ChatRequest, Exchange, utcnow
from prober.run import session as session_module
from prober.run.budget import RunBudget
from prober.run.progress import RunProgress
from prober.run.session import TargetGate, TargetSession, send_lag_ns
from prober.targets.base import TargetAdapter

pytestmark = pytest.mark.unit

TARGET = TargetConfig(protocol="openai", base_url="http://unused.invalid", model="m", name="t")


class _StampingAdapter(TargetAdapter):
    """No wire: notes when each request would have been written, then answers after `hold_s`."""

    protocol = "openai"

    def __init__(self, hold_s: float) -> None:
        super().__init__(TARGET, TARGET.base_url or "", None)
        self.hold_s = hold_s
        self.sent: list[tuple[int, int]] = []      # (request index, perf_counter_ns at the write)

    async def send(self, request, attempt=1, before_resend=None):
        start_ns = time.perf_counter_ns()
        self.sent.append((request.stored_extra["index"], start_ns))
        await asyncio.sleep(self.hold_s)
        return Exchange(protocol="openai", url="http://unused.invalid", request_body={}, request_headers={},
                        started_at=utcnow(), start_ns=start_ns, status=200, end_ns=time.perf_counter_ns())

    async def aclose(self):
        pass


class _OnScheduleAdapter(_StampingAdapter):
    """Writes on schedule: notes when each request was handed over and when it is due, and
    "writes" it then."""

    writes_on_schedule = True

    def __init__(self, hold_s: float) -> None:
        super().__init__(hold_s)
        self.handed: dict[int, tuple[int, int]] = {}     # index -> (perf_counter_ns at send, due)

    async def send(self, request, attempt=1, before_resend=None, *, not_before_ns=None):
        assert not_before_ns is not None
        self.handed[request.stored_extra["index"]] = (time.perf_counter_ns(), not_before_ns)
        await asyncio.sleep(max(not_before_ns - time.perf_counter_ns(), 0) / 1e9)
        while time.perf_counter_ns() < not_before_ns:       # uvloop's sleeps end up to 1 ms early
            await asyncio.sleep(0)
        return await super().send(request, attempt, before_resend)


def _session(adapter: TargetAdapter) -> TargetSession:
    writer = type("Discard", (), {"put": lambda self, sample: None})()
    return TargetSession(run_id="r", target=TARGET, adapter=adapter, gate=TargetGate.for_target(TARGET),
                         probe_name="p", budget=RunBudget(Budget()), writer=writer, settings=RunnerConfig(),
                         progress=RunProgress(Console(), enabled=False), request_counter=itertools.count())


def _request(i: int) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": "x"}], stored_extra={"index": i})


def _open_loop(run_on, adapter: TargetAdapter, offsets: list[float]) -> tuple[int, list[Exchange]]:
    """Run one open loop over `offsets`; returns perf_counter_ns just before it began, and its exchanges."""
    async def main():
        session = _session(adapter)
        t0 = time.perf_counter_ns()
        exchanges = await session.open_loop(offsets_s=offsets, make_request=_request, max_concurrency=None,
                                            case="c", labels={}, title="t")
        return t0, exchanges

    return run_on(main())


def test_each_request_starts_once_in_schedule_order_and_never_before_it_is_due(run_on):
    # Out of order on purpose, with ties and a burst of requests due at the same moment.
    offsets = [0.030, 0.0, 0.010, 0.010, 0.050, 0.020, 0.020, 0.020, 0.0005, 0.045]
    adapter = _StampingAdapter(hold_s=0.02)

    t0, exchanges = _open_loop(run_on, adapter, offsets)
    assert len(exchanges) == len(offsets)
    sent = dict(adapter.sent)
    assert sorted(sent) == list(range(len(offsets)))              # each exactly once
    by_time = [i for i, _ in sorted(adapter.sent, key=lambda item: item[1])]
    assert [offsets[i] for i in by_time] == sorted(offsets)       # in the schedule's order
    for i, start_ns in sent.items():
        # open_loop anchors its schedule after t0, so due >= t0 + offset: a start before that is early.
        assert start_ns >= t0 + round(offsets[i] * 1e9) - 1_000, (i, (start_ns - t0) / 1e6)
    assert all(ex.extra["send_lag_ms"] >= -0.001 for ex in exchanges)


def test_a_cancelled_open_loop_starts_nothing_more(run_on):
    # Cancelled as soon as request 1 has started, half a second before request 2 is due: the
    # outcome does not hang on how promptly a busy machine wakes a sleeping test.
    offsets = [0.0, 0.01, 0.5, 0.6, 0.7]
    adapter = _StampingAdapter(hold_s=0.0)

    async def main():
        task = asyncio.create_task(_session(adapter).open_loop(
            offsets_s=offsets, make_request=_request, max_concurrency=None, case="c", labels={}, title="t"))
        while len(adapter.sent) < 2:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.8)           # past the end of the schedule

    run_on(main())
    assert sorted(i for i, _ in adapter.sent) == [0, 1]


def test_an_empty_schedule_returns_at_once(run_on):
    async def main():
        return await _session(_StampingAdapter(0.0)).open_loop(
            offsets_s=[], make_request=_request, max_concurrency=None, case="c", labels={}, title="t")

    assert run_on(main()) == []


def test_the_levels_exchanges_are_freed_without_the_garbage_collector(run_on):
    # A reference cycle around the level (the launcher's closure once held one) leaves every task
    # and exchange for a collection, which stops the event loop for tens of ms at some later turn.
    offsets = [i * 0.001 for i in range(20)]

    async def main():
        exchanges = await _session(_StampingAdapter(hold_s=0.0)).open_loop(
            offsets_s=offsets, make_request=_request, max_concurrency=None, case="c", labels={}, title="t")
        return [weakref.ref(exchange) for exchange in exchanges]

    gc.disable()
    try:
        refs = run_on(main())
        assert len(refs) == len(offsets)
        assert [ref() for ref in refs] == [None] * len(offsets)
    finally:
        gc.enable()


def test_an_adapter_that_writes_on_schedule_gets_each_request_ahead_with_its_due_time(run_on, monkeypatch):
    # A lead of 50 ms instead of 5: "handed over before it was due" then holds on a busy machine.
    lead_ns = 50_000_000
    monkeypatch.setattr(session_module, "SEND_LEAD_NS", lead_ns)
    offsets = [0.0, 0.012, 0.012, 0.060, 0.100, 0.101]
    adapter = _OnScheduleAdapter(hold_s=0.01)

    t0, exchanges = _open_loop(run_on, adapter, offsets)
    assert sorted(adapter.handed) == list(range(len(offsets)))
    due = {i: not_before for i, (_, not_before) in adapter.handed.items()}
    for i, offset in enumerate(offsets):
        # The schedule's own due times, anchored once: their differences are the offsets exactly.
        assert due[i] - due[0] == round(offset * 1e9) - round(offsets[0] * 1e9)
        assert due[i] >= t0 + round(offset * 1e9)
        handed_ns = adapter.handed[i][0]
        assert handed_ns >= due[i] - lead_ns, (i, (due[i] - handed_ns) / 1e6)     # at most the lead early
        if offset >= lead_ns / 1e9:
            assert handed_ns < due[i], (i, (handed_ns - due[i]) / 1e6)          # and ahead of time
    # send_lag_ms counts from the write (start_ns, when due), not from the early hand-over.
    for i, ex in enumerate(exchanges):
        assert ex.start_ns >= due[i]
        assert ex.extra["send_lag_ms"] == round((ex.start_ns - due[i]) / 1e6, 3)


def test_send_lag_leaves_out_only_the_part_of_a_connect_after_the_request_was_ready():
    ms = 1_000_000
    # Reused connection, written 0.4 ms after it was ready.
    assert send_lag_ns(start_ns=100_400_000, ready_ns=100 * ms, connect_ns=0, connected_ns=None) == 400_000
    # A connect of 30 ms begun 1 ms after ready (a request started when due): the connect is left out.
    assert send_lag_ns(start_ns=131 * ms + 200_000, ready_ns=100 * ms, connect_ns=30 * ms,
                       connected_ns=131 * ms) == 1 * ms + 200_000
    # The same, from an adapter that does not report when the connect ended (taken as the write).
    assert send_lag_ns(start_ns=131 * ms, ready_ns=100 * ms, connect_ns=30 * ms, connected_ns=None) == 1 * ms
    # Opened ahead, done 2 ms before the request was due: nothing to leave out.
    assert send_lag_ns(start_ns=100 * ms + 300_000, ready_ns=100 * ms, connect_ns=3 * ms,
                       connected_ns=98 * ms) == 300_000
    # Begun 4 ms ahead, done 6 ms after the due time: those 6 ms are the network's.
    assert send_lag_ns(start_ns=106 * ms + 100_000, ready_ns=100 * ms, connect_ns=10 * ms,
                       connected_ns=106 * ms) == 100_000
    # Prepared ahead and refused at connect, 3 ms before it was due: not late.
    assert send_lag_ns(start_ns=97 * ms, ready_ns=100 * ms, connect_ns=0, connected_ns=None) == 0
