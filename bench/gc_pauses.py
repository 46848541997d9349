"""Garbage-collector pauses in a client process: a full collection stops the event loop (and, by
the GIL, every thread) for as long as it takes to walk every tracked object, which shows up
directly in the TTFT tail. Timed with `gc.callbacks`, which cost a few microseconds a collection.
"""

from __future__ import annotations

import gc
from time import perf_counter_ns, thread_time_ns


class GcPauses:
    def __init__(self) -> None:
        self._started: int | None = None
        self._started_cpu = 0
        self.reset()
        gc.callbacks.append(self._callback)

    def reset(self) -> None:
        self.count = 0
        self.total_ns = 0
        self.total_cpu_ns = 0
        self.max_ns = 0
        self.max_cpu_ns = 0     # CPU time of the longest pause: far below it, the process was descheduled
        self.full = 0           # collections of the oldest generation

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = perf_counter_ns()
            self._started_cpu = thread_time_ns()
            return
        if self._started is None:
            return
        took = perf_counter_ns() - self._started
        took_cpu = thread_time_ns() - self._started_cpu
        self._started = None
        self.count += 1
        self.total_ns += took
        self.total_cpu_ns += took_cpu
        if took > self.max_ns:
            self.max_ns = took
            self.max_cpu_ns = took_cpu
        if info.get("generation") == 2:
            self.full += 1

    def take(self) -> dict:
        """The pauses since the last `take`, in ms, and how many objects the collector tracks now."""
        summary = {"gc_count": self.count, "gc_full": self.full, "gc_total_ms": self.total_ns / 1e6,
                   "gc_total_cpu_ms": self.total_cpu_ns / 1e6,
                   "gc_max_ms": self.max_ns / 1e6,
                   "gc_max_cpu_ms": self.max_cpu_ns / 1e6, "gc_tracked": len(gc.get_objects())}
        self.reset()
        return summary
