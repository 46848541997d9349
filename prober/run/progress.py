"""Progress for long runs: a rich bar per suite level on a terminal, with the time it has taken and
the time it will still take at its rate so far (the ETA), one line per level otherwise (cron logs
and CI output stay readable)."""

from __future__ import annotations

import time
from typing import Any

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


class RunProgress:
    def __init__(self, console: Console, enabled: bool = True) -> None:
        self.console = console
        self.live = enabled and console.is_terminal
        self.enabled = enabled
        self._bars: Progress | None = None
        self._plain: dict[int, dict[str, Any]] = {}
        self._next_id = 0
        self.retries = 0

    def __enter__(self) -> RunProgress:
        if self.live:
            self._bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(),
                                  TextColumn("eta"), TimeRemainingColumn(), console=self.console)
            self._bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bars is not None:
            self._bars.stop()

    def start_task(self, description: str, total: int | None) -> TaskID:
        if self._bars is not None:
            return self._bars.add_task(description, total=total, failed=0)
        self._next_id += 1
        self._plain[self._next_id] = {"description": description, "total": total, "done": 0, "failed": 0,
                                      "start": time.monotonic()}
        return TaskID(self._next_id)

    def advance(self, task_id: TaskID, failed: bool = False) -> None:
        if self._bars is not None:
            task = self._bars.tasks[[t.id for t in self._bars.tasks].index(task_id)]
            self._bars.update(task_id, advance=1, failed=task.fields["failed"] + int(failed))
        elif task_id in self._plain:
            self._plain[task_id]["done"] += 1
            self._plain[task_id]["failed"] += int(failed)

    def finish_task(self, task_id: int) -> None:
        state = self._plain.pop(task_id, None)
        if state is not None and self.enabled:
            count = state["done"] if state["total"] is None else f"{state['done']}/{state['total']}"
            self.console.print(f"{state['description']}: {count} requests, "
                               f"{state['failed']} failed, {time.monotonic() - state['start']:.1f}s",
                               markup=False, highlight=False)

    def note_retry(self) -> None:
        self.retries += 1

    def log(self, message: str) -> None:
        self.console.print(message, markup=False, highlight=False)
