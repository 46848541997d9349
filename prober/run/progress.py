"""Progress for long runs: a rich bar per suite level on a terminal, with the time it has taken and
the time it will still take at its rate so far (the ETA); otherwise (cron logs, CI output) a
timestamped line per running level at least every `progress_interval_s()` seconds and one when it
ends, each with done/total and the ETA (prober/core/progress_lines.py)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from prober.core.progress_lines import progress_interval_s, progress_line


@dataclass
class _PlainTask:
    description: str
    total: int | None
    done: int = 0
    failed: int = 0
    start: float = field(default_factory=time.monotonic)
    unit: str = "requests"

    def line(self, *, finished: bool = False) -> str:
        return progress_line(self.description, self.done, self.total, time.monotonic() - self.start,
                             unit=self.unit, failed=self.failed if self.unit == "requests" else None,
                             finished=finished)


class RunProgress:
    def __init__(self, console: Console, enabled: bool = True) -> None:
        self.console = console
        self.live = enabled and console.is_terminal
        self.enabled = enabled
        self._bars: Progress | None = None
        self._plain: dict[int, _PlainTask] = {}
        self._next_id = 0
        self.retries = 0
        # The plain lines come from a thread: the event loop may be busy for the whole interval.
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._last_line = time.monotonic()
        self.interval_s = progress_interval_s()
        self._suite: TaskID | None = None

    def __enter__(self) -> RunProgress:
        if self.live:
            self._bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(),
                                  TextColumn("eta"), TimeRemainingColumn(), console=self.console)
            self._bars.start()
        elif self.enabled:
            self._ticker = threading.Thread(target=self._tick, name="prober-progress", daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._bars is not None:
            self._bars.stop()

    def _tick(self) -> None:
        """Every running level gets a line once the last line is `interval_s` old."""
        while not self._stop.wait(max(0.01, self._last_line + self.interval_s - time.monotonic())):
            with self._lock:
                if time.monotonic() - self._last_line < self.interval_s:
                    continue          # a level ended and said so meanwhile
                for task in self._plain.values():
                    self._print(task.line())
                self._last_line = time.monotonic()

    def _print(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def start_task(self, description: str, total: int | None, *, unit: str = "requests") -> TaskID:
        if self._bars is not None:
            return self._bars.add_task(description, total=total, failed=0)
        with self._lock:
            self._next_id += 1
            self._plain[self._next_id] = _PlainTask(description, total, unit=unit)
            return TaskID(self._next_id)

    def start_suite(self, suite: str, entries: int) -> None:
        """The whole suite's bar: `entries` suite entries (each entry once per target) to sample;
        its failed column adds up the failed requests of every level."""
        self._suite = self.start_task(f"suite {suite} (entries)", entries, unit="entries")

    def entry_done(self) -> None:
        if self._suite is not None:
            self.advance(self._suite)

    def finish_suite(self) -> None:
        if self._suite is not None:
            self.finish_task(self._suite)
            self._suite = None

    def advance(self, task_id: TaskID, failed: bool = False) -> None:
        if self._bars is not None:
            task = self._bars.tasks[[t.id for t in self._bars.tasks].index(task_id)]
            self._bars.update(task_id, advance=1, failed=task.fields["failed"] + int(failed))
            if failed and self._suite is not None and task_id != self._suite:
                suite = self._bars.tasks[[t.id for t in self._bars.tasks].index(self._suite)]
                self._bars.update(self._suite, failed=suite.fields["failed"] + 1)
            return
        with self._lock:
            if (state := self._plain.get(task_id)) is not None:
                state.done += 1
                state.failed += int(failed)

    def finish_task(self, task_id: int) -> None:
        if self._bars is not None:
            # A total is an upper bound (an adaptive search may stop early): the bar ends at what it
            # sent, so that it shows complete and its clock stops.
            task = self._bars.tasks[[t.id for t in self._bars.tasks].index(TaskID(task_id))]
            self._bars.update(TaskID(task_id), total=task.completed)
            self._bars.stop_task(TaskID(task_id))
            return
        with self._lock:
            state = self._plain.pop(task_id, None)
            if state is not None and self.enabled:
                self._print(state.line(finished=True))
                self._last_line = time.monotonic()

    def note_retry(self) -> None:
        self.retries += 1

    def log(self, message: str) -> None:
        self.console.print(message, markup=False, highlight=False)
