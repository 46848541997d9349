"""Pause Python's cyclic garbage collector while a report is built or a run's drift is judged.

A report over a long window holds a few hundred thousand metric rows and builds a few million
small objects more (series, points, charts, page text) that live until the pages are written.
Each full collection scans every live container, and the allocations keep triggering them: on a
synthetic year of 20 targets, a third of the site's CPU time went to collections that freed
nothing (the report's objects are plain trees, freed by reference counting). The cycles some
libraries leave behind wait until the collector runs again on its own, after the report.

A post-run drift evaluation is the same case: a year's baselines for 20 targets are 150,000
metric rows read as tuples and 100,000 run values built from them, for a few seconds.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


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
