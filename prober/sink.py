"""From the event loop to the store, off the timing path.

`put` is called on the event loop the moment an attempt completes and returns at once. A single
worker thread then checks the exchange against the official SDK types (findings, never errors)
and hands the sample to the store's batching writer, which makes it durable within a second.
"""

from __future__ import annotations

import concurrent.futures
import threading

from prober.records import Sample
from prober.targets.conformance import check_exchange


class SampleSink:
    def __init__(self, writer, conformance: bool = True) -> None:
        self._writer = writer
        self._conformance = conformance
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sample-sink")
        self._pending: set[concurrent.futures.Future] = set()
        self._lock = threading.Lock()
        self.count = 0

    def put(self, sample: Sample) -> None:
        self.count += 1
        future = self._pool.submit(self._process, sample)
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: concurrent.futures.Future) -> None:
        with self._lock:
            self._pending.discard(future)

    def _process(self, sample: Sample) -> None:
        exchange = sample.exchange
        if self._conformance:
            try:
                exchange.findings.extend(check_exchange(exchange))
            except Exception as exc:  # a checker bug must never lose a sample
                exchange.findings.append(f"conformance check failed: {type(exc).__name__}: {exc}")
        exchange.raw_events = []   # parsed payloads are not stored; free them early
        self._writer.submit(sample)

    def flush(self) -> None:
        """Block until every sample put so far is committed (raises a writer error if any)."""
        with self._lock:
            pending = list(self._pending)
        concurrent.futures.wait(pending)
        for future in pending:
            future.result()
        self._writer.flush()

    def close(self) -> None:
        self.flush()
        self._pool.shutdown(wait=True)
        self._writer.close()
