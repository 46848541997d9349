"""Client honesty: watch the prober's own event loop while it measures.

A task asks to wake every `interval` seconds and records how late it woke. When the loop is
saturated (too many streams for the CPU), every timestamp the client takes is late too, so a
latency figure measured then is flagged rather than silently reported.
"""

from __future__ import annotations

import asyncio
import time
from typing import TypedDict

from prober.core import stats

SATURATION_P99_MS = 20.0


class LagSummary(TypedDict):
    n: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    saturated: bool


class LoopLagMonitor:
    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.samples: list[tuple[int, float]] = []   # (perf_counter_ns at wake-up, lag ms)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="loop-lag-monitor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _watch(self) -> None:
        while True:
            expected = time.perf_counter_ns() + int(self.interval * 1e9)
            await asyncio.sleep(self.interval)
            now = time.perf_counter_ns()
            self.samples.append((now, max(0.0, (now - expected) / 1e6)))

    def summary(self, since_ns: int | None = None, until_ns: int | None = None) -> LagSummary:
        lags = [lag for ts, lag in self.samples
                if (since_ns is None or ts >= since_ns) and (until_ns is None or ts <= until_ns)]
        p99 = stats.percentile(lags, 99)
        return {
            "n": len(lags),
            "p50_ms": stats.percentile(lags, 50),
            "p99_ms": p99,
            "max_ms": max(lags) if lags else None,
            "saturated": bool(p99 is not None and p99 > SATURATION_P99_MS),
        }
