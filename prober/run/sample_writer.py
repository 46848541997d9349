"""From the event loop to the store, off the timing path and off the event loop's core.

`put` is called on the event loop the moment an attempt completes and returns at once. A child
process then checks the exchange against the official SDK types (findings, never errors) and hands
the sample to the store's batching writer, which makes it durable within a second.

Why a process and not a thread: conformance checking and the SQL writer cost about as much CPU per
request as the whole client path. In a thread they share the event loop's GIL, and at a few hundred
concurrent streams the loop then lags by 100-300 ms, which inflates every TTFT it measures
(bench/ttft_overhead.py shows both layouts). A process puts that work on the other core.

Why a fork server: the writer starts from multiprocessing's fork server, a clean single-threaded
interpreter started once per process, which imports what every writer needs (WRITER_MODULES) and
forks a writer from there; the event loop's process, which runs threads, is never forked. A
`prober run` pays the same interpreter and imports as a spawned child would, once; a process that
starts many writers (the test suite, with the SDK types preloaded too) pays them once in all.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import pickle
import queue
import signal
from typing import Any

from prober.core.findings import active_known, register_known, set_aside_known
from prober.core.records import Sample
from prober.core.redact import active_secrets, register

_CONTEXT = multiprocessing.get_context("forkserver")   # never fork a process that runs threads
_POLL_SECONDS = 0.5
# How much lower the writer's CPU priority is than the run's (see _writer_main).
WRITER_NICENESS = 10
# What every writer imports, imported once in the fork server. The SDK types are not here: a writer
# imports those when its protocol's first sample arrives (see _writer_main).
WRITER_MODULES = ("prober.run.sample_writer", "prober.store", "prober.targets.conformance")
_CONTEXT.set_forkserver_preload(list(WRITER_MODULES))


def start_fork_server() -> None:
    """Start this process's fork server if it is not running, with SIGTERM blocked: the blocked
    mask survives fork and exec, so the server outlives the SIGTERM that systemd and `timeout`
    send the whole process group. The writer's exit status reaches us through the server; a writer
    whose server died would look dead (exit code 255) while it still stores the run's last samples.
    The server ends by itself once every process it served has (multiprocessing's alive pipe).
    The resource tracker goes first: starting it unblocks SIGTERM (it ignores SIGTERM itself)."""
    multiprocessing.resource_tracker.ensure_running()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


class SampleStorageError(Exception):
    """Samples could not be stored; the message says how many and why."""


class SampleWriterProcess:
    def __init__(self, store_url: str, max_output_chars: int | None = 65536, conformance: bool = True,
                 start_timeout: float = 120.0) -> None:
        start_fork_server()
        self._inbox = _CONTEXT.Queue()
        self._replies = _CONTEXT.Queue()
        self._tokens = itertools.count()
        self._conformance = conformance
        self._pending: list[bytes] = []                           # pickled samples not yet queued
        self._send_scheduled_on: asyncio.AbstractEventLoop | None = None
        self.count = 0
        self._process = _CONTEXT.Process(
            target=_writer_main, name="prober-sample-writer", daemon=True,
            args=(store_url, max_output_chars, conformance, self._inbox, self._replies, active_secrets(),
                  active_known()))
        self._process.start()
        self._await_reply("ready", start_timeout)

    @property
    def pid(self) -> int | None:
        """The writer process's id (its CPU time is the run's too)."""
        return self._process.pid

    def put(self, sample: Sample) -> None:
        """Hand the sample over. It is pickled here, not later in the queue's feeder thread, so that
        the exchange's raw events (the wire payloads the writer checks, 20-odd tuples a stream) can
        be dropped at once: an open or closed loop keeps every exchange until it ends, and what it
        keeps is what each garbage collection during the loop has to walk."""
        self.count += 1
        if not self._conformance:
            sample.exchange.raw_events = []       # nothing will check them: not worth the pickling
        self._pending.append(pickle.dumps(sample, pickle.HIGHEST_PROTOCOL))
        sample.exchange.raw_events = []
        # Queued as one batch per event-loop iteration: each queue put wakes the queue's feeder
        # thread, which then wants the GIL the event loop holds (about 20 us of CPU a put, measured;
        # a batch of 16 costs 1-4 us a sample).
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._send_pending()
            return
        if self._send_scheduled_on is not loop:
            self._send_scheduled_on = loop
            loop.call_soon(self._send_pending)

    def _send_pending(self) -> None:
        self._send_scheduled_on = None
        if self._pending:
            batch, self._pending = self._pending, []
            self._inbox.put(batch)

    def flush(self, timeout: float | None = None) -> None:
        """Block until every sample put so far is committed; raise SampleStorageError if any was lost."""
        self._send_pending()
        token = next(self._tokens)
        self._inbox.put(("flush", token))
        self._await_reply(token, timeout)

    def close(self, timeout: float | None = 300.0) -> None:
        if not self._process.is_alive():
            return
        self._send_pending()
        token = next(self._tokens)
        self._inbox.put(("close", token))
        try:
            self._await_reply(token, timeout)
        finally:
            self._process.join(10)
            if self._process.is_alive():
                self._process.kill()

    def _await_reply(self, token: Any, timeout: float | None) -> None:
        while True:
            try:
                got, error = self._replies.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if not self._process.is_alive():
                    raise SampleStorageError(
                        f"the sample-writer process died (exit code {self._process.exitcode})") from None
                if timeout is not None:
                    timeout -= _POLL_SECONDS
                    if timeout <= 0:
                        raise SampleStorageError("the sample-writer process did not answer in time") from None
                continue
            if error is not None:
                raise SampleStorageError(error)
            if got == token:
                return


def _writer_main(store_url: str, max_output_chars: int | None, conformance: bool,
                 inbox: multiprocessing.Queue[Any], replies: multiprocessing.Queue[Any],
                 secrets: tuple[str, ...], known: dict[str, tuple[str, ...]]) -> None:
    # Ctrl-C, `timeout` and systemd signal the whole process group; the parent decides when the
    # run stops, and then closes the writer, which still has samples to write. Should the parent
    # die instead, the loop below notices and stops after storing what arrived. (Our parent is the
    # process that asked for the writer, not the fork server that forked it.)
    parent = multiprocessing.parent_process()
    assert parent is not None
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # The fork server's redactor is empty: the parent's secrets come with the arguments (through
    # the server's pipe, never a command line), before the first row is built.
    register(secrets)
    register_known(known)          # each target's known finding codes, the same way
    # The writer only stores. When the machine has no core to spare (the bench's 512 streams, a
    # model server on the same box), the kernel should run the event loop first, which stamps
    # arrivals and keeps an open loop's schedule: at a lower priority the writer waits instead,
    # its samples queued, and a flush still waits for every one. On an idle core it costs nothing.
    # Set before the store's writer thread starts, which inherits it (Linux: per thread).
    # bench/ttft_overhead.py at 512 streams, three pairs under load: 0.91-0.96x the reference's
    # rate against 0.86-0.93x at the run's own priority, p99 overhead 5.5-7.9 ms against 9.5-17.5.
    with contextlib.suppress(OSError):
        os.nice(WRITER_NICENESS)
    # An SDK's types are imported when its protocol's first sample arrives (conformance.py), not
    # here: the run waits for "ready", and importing both SDKs costs 2-3 s of CPU (the Anthropic SDK
    # most of it) that a run speaking one protocol, or none when conformance is off, never needs.
    # Checking here is off the event loop, so the first check's wait only delays its storage.
    from prober.store import Store
    from prober.targets.conformance import check_exchange
    from prober.targets.structured import structured_output_findings

    try:
        store = Store.open(store_url)
        writer = store.sample_writer(max_output_chars)
    except Exception as exc:
        replies.put(("ready", f"{type(exc).__name__}: {exc}"))
        return
    replies.put(("ready", None))

    def store_sample(sample: Sample) -> None:
        exchange = sample.exchange
        # Whether the answer honoured the structure it was asked for: what the suites' rates count,
        # so it does not depend on conformance checking being on.
        exchange.findings.extend(structured_output_findings(exchange))
        if conformance:
            try:
                exchange.findings.extend(check_exchange(exchange))
            except Exception as exc:   # a checker bug must never lose a sample
                exchange.findings.append(f"conformance check failed: {type(exc).__name__}: {exc}")
        if known.get(sample.target):
            # This server is known to do these: notices, so that they neither count nor page.
            exchange.findings = set_aside_known(exchange.findings, exchange.extra.setdefault("notices", []),
                                                known[sample.target])
            if not exchange.extra["notices"]:
                del exchange.extra["notices"]
        exchange.raw_events = []      # parsed payloads are checked, not stored
        writer.submit(sample)

    try:
        while True:
            try:
                item = inbox.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if not parent.is_alive():
                    break   # the run was killed: keep what arrived, then stop
                continue
            if isinstance(item, list):
                for pickled in item:
                    store_sample(pickle.loads(pickled))
                continue
            command, token = item
            try:
                writer.flush()
                replies.put((token, None))
            except Exception as exc:
                replies.put((token, f"{type(exc).__name__}: {exc}"))
            if command == "close":
                return
    finally:
        # Drain anything the parent managed to send before it went away.
        while True:
            try:
                item = inbox.get_nowait()
            except (queue.Empty, EOFError, OSError):
                break
            if isinstance(item, list):
                for pickled in item:
                    store_sample(pickle.loads(pickled))
        try:
            writer.close()
        finally:
            store.close()
