"""The sample writer: a background thread that makes each submitted sample durable within a second.

`submit` only appends to a queue (it is called from the event loop, on the timing path). The
thread takes whatever has accumulated and commits it as one batch, then the next: under light load
each sample is committed on its own within milliseconds, under heavy load batches grow, and a
sample never waits for more than the commit in flight plus its own.

Errors are data about the store, not about the endpoint: a batch that fails is retried row by row
so that one bad row cannot take its neighbours with it, and every failure is kept and raised from
the next `flush` or `close`.
"""

from __future__ import annotations

import atexit
import collections
import sys
import threading
import time
from typing import Any

import sqlalchemy as sa

from prober.core.records import Sample
from prober.store import schema
from prober.store.engine import is_transient, write_transaction
from prober.store.rows import sample_row

MAX_BATCH = 500
_KEPT_ERRORS = 5


class SampleWriteError(RuntimeError):
    """Samples that could not be stored. `lost` counts them; `errors` holds the first few causes."""

    def __init__(self, lost: int, errors: list[BaseException]) -> None:
        self.lost = lost
        self.errors = errors
        first = errors[0] if errors else None
        # A driver error's own text, not SQLAlchemy's, which appends the statement and every
        # parameter (the sample's contents) over dozens of lines.
        cause = first.orig if isinstance(first, sa.exc.DBAPIError) else first
        detail = f": {type(cause).__name__}: {str(cause).strip()}" if cause is not None else ""
        super().__init__(f"{lost} sample(s) could not be stored{detail}")


class SampleWriter:
    def __init__(self, engine: sa.Engine, max_output_chars: int | None = 65536) -> None:
        self._engine = engine
        self._max_output_chars = max_output_chars
        self._lock = threading.Lock()
        self._has_work = threading.Condition(self._lock)
        self._progress = threading.Condition(self._lock)
        self._queue: collections.deque[Sample] = collections.deque()
        self._submitted = 0
        self._processed = 0   # committed or lost
        self._committed = 0
        self._lost = 0
        self._errors: list[BaseException] = []
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="prober-store-writer", daemon=True)
        self._thread.start()
        _open_writers.add(self)

    # -- called from any thread -------------------------------------------------------------

    def submit(self, sample: Sample) -> None:
        """Queue a sample for writing. Cheap and thread-safe; do not mutate the sample afterwards."""
        with self._lock:
            if self._closing:
                raise RuntimeError("the sample writer is closed")
            self._queue.append(sample)
            self._submitted += 1
            self._has_work.notify()

    def flush(self, timeout: float | None = None) -> None:
        """Block until every sample submitted so far is committed; raise SampleWriteError for any lost."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            goal = self._submitted
            while self._processed < goal:
                if not self._thread.is_alive():
                    raise RuntimeError("the sample writer thread has stopped")  # a bug, never expected
                wait = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
                if wait <= 0:
                    raise TimeoutError(f"{goal - self._processed} sample(s) still waiting to be written")
                self._progress.wait(wait)
            self._raise_errors()

    def close(self, timeout: float | None = None) -> None:
        """Write everything submitted, stop the thread, and raise SampleWriteError for any lost."""
        with self._lock:
            self._closing = True
            self._has_work.notify()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the sample writer did not finish writing in time")
        _open_writers.discard(self)
        with self._lock:
            self._raise_errors()

    @property
    def closed(self) -> bool:
        return self._closing

    @property
    def committed(self) -> int:
        return self._committed

    @property
    def pending(self) -> int:
        return self._submitted - self._processed

    def __enter__(self) -> SampleWriter:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _raise_errors(self) -> None:
        # Caller holds the lock. Each loss is reported once.
        if self._lost:
            error = SampleWriteError(self._lost, self._errors)
            self._lost, self._errors = 0, []
            raise error

    # -- the writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closing:
                    self._has_work.wait()
                if not self._queue:
                    return
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), MAX_BATCH))]
            try:
                committed, failures = self._write(batch)
            except BaseException as exc:  # never let the thread die with samples in its hands
                committed, failures = 0, [exc] * len(batch)
            with self._lock:
                self._committed += committed
                self._processed += len(batch)
                self._lost += len(failures)
                room = _KEPT_ERRORS - len(self._errors)
                self._errors.extend(failures[:max(room, 0)])
                self._progress.notify_all()

    def _write(self, batch: list[Sample]) -> tuple[int, list[BaseException]]:
        failures: list[BaseException] = []
        rows = []
        for sample in batch:
            try:
                rows.append(sample_row(sample, self._max_output_chars))
            except Exception as exc:
                failures.append(exc)
        if not rows:
            return 0, failures
        try:
            write_transaction(self._engine, _insert, rows)
            return len(rows), failures
        except Exception as exc:
            # Still locked or disconnected after retrying: the rows are lost, row by row would not help.
            if (isinstance(exc, sa.exc.DBAPIError) and is_transient(exc)) or len(rows) == 1:
                return 0, failures + [exc] * len(rows)
        # Something in the batch is bad (a constraint, a value the database refuses): find it.
        committed = 0
        for row in rows:
            try:
                write_transaction(self._engine, _insert, [row])
                committed += 1
            except Exception as exc:
                failures.append(exc)
        return committed, failures


def _insert(conn: sa.Connection, rows: list[dict[str, Any]]) -> None:
    conn.execute(schema.samples.insert(), rows)


# Writers the program forgot to close are flushed at exit, so completed samples are not lost.
_open_writers: set[SampleWriter] = set()


@atexit.register
def _close_forgotten_writers() -> None:
    for writer in list(_open_writers):
        try:
            writer.close(timeout=60)
        except Exception as exc:
            print(f"prober store: at exit: {exc}", file=sys.stderr)
