"""How prober steers Python's cyclic garbage collector: two policies, one per kind of work.

`collector_paused` pauses it while a report is built or a run's drift is judged.

A report over a long window holds a few hundred thousand metric rows and builds a few million
small objects more (series, points, charts, page text) that live until the pages are written.
Each full collection scans every live container, and the allocations keep triggering them: on a
synthetic year of 20 targets, a third of the site's CPU time went to collections that freed
nothing (the report's objects are plain trees, freed by reference counting). The cycles some
libraries leave behind wait until the collector runs again on its own, after the report.

A post-run drift evaluation is the same case: a year's baselines for 20 targets are 150,000
metric rows read as tuples and 100,000 run values built from them, for a few seconds.

`quiet_garbage_collector` is for a run while it measures: small young collections, no full ones.

A collection stops the event loop, and whichever first tokens or due sends fall in it are late by
its length. Python's own thresholds let survivors pile up: a full collection walks every object
left from start-up (about 100k; 60-90 ms in bench/ttft_overhead.py), and with a high first
threshold one young collection walked the 80k objects a 3,200-request open-loop level keeps
(its tasks and exchanges): 55-70 ms, the worst send lags of bench/open_loop.py at 800/s.

So: collect and freeze what exists at the start; then after every collection freeze what survived
it, so that the next one walks only what was allocated since: at most `YOUNG_THRESHOLD` objects
more than were freed, well under 2 ms. Measured on a quiet 2-core machine, open loop at 800/s
(bench/open_loop.py's setup, 3,200 requests): thresholds of 100 / 300 / 1,000 / 100,000 gave
collections of at most 0.9-1.7 / 1.7-3.8 / 8-12 / 59-68 ms and send-lag p99 of 3.4-8.3 / 2.5-6.7 /
17-27 / 18-22 ms; at 512 closed-loop streams the 1,193 collections of a 1,536-request level cost
29 ms of CPU in all (0.02 ms a request), the longest 1.6 ms.

Requests leave no reference cycles (tests/runner/test_open_loop_launch.py checks that a level's
exchanges are freed by reference counting), and frozen objects are still freed by reference
counting. What waits is a cycle that forms among frozen objects: asyncio's transport of a closed
connection is one (4-5 objects a connection); those are collected when the block ends. After
`MAX_FREEZES` collections (about a million requests) the block stops freezing and falls back to
rare collections, so a very long run cannot hold such cycles without bound.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

YOUNG_THRESHOLD = 100
MAX_FREEZES = 1_000_000
# Once MAX_FREEZES is reached: rare collections (each young one walks up to 100k objects).
_FALLBACK_THRESHOLDS = (100_000, 50, 1000)



@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside the block (the collector is enabled again after it, if it was)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def quiet_garbage_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    freezes = 0

    def freeze_survivors(phase: str, info: dict[str, Any]) -> None:
        nonlocal freezes
        if phase != "stop" or freezes >= MAX_FREEZES:
            return
        freezes += 1
        gc.freeze()
        if freezes == MAX_FREEZES:
            gc.set_threshold(*_FALLBACK_THRESHOLDS)

    gc.set_threshold(YOUNG_THRESHOLD, 10, 10)
    gc.callbacks.append(freeze_survivors)
    try:
        yield
    finally:
        gc.callbacks.remove(freeze_survivors)
        gc.set_threshold(*thresholds)
        gc.unfreeze()
