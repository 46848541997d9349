"""prober/core/collector.py: while a run measures, each young collection walks only what was
allocated since the last one; the collector is as it was after the block."""

from __future__ import annotations

import gc
import weakref

import pytest

from prober.core import collector
from prober.core.collector import YOUNG_THRESHOLD, quiet_garbage_collector

pytestmark = pytest.mark.unit


def _unfrozen_tracked() -> int:
    return sum(len(gc.get_objects(generation)) for generation in range(3))


def test_survivors_are_frozen_so_a_young_collection_walks_only_the_newest():
    collected_young: list[int] = []

    def note(phase, info):
        if phase == "start":
            collected_young.append(len(gc.get_objects(0)) + len(gc.get_objects(1)))

    with quiet_garbage_collector():
        frozen_at_start = gc.get_freeze_count()
        gc.callbacks.append(note)
        try:
            kept = [[i] for i in range(30 * YOUNG_THRESHOLD)]       # survivors, as a level keeps
            unfrozen = _unfrozen_tracked()
        finally:
            gc.callbacks.remove(note)
        assert len(kept) == 30 * YOUNG_THRESHOLD
        assert gc.get_freeze_count() - frozen_at_start >= 29 * YOUNG_THRESHOLD
        assert unfrozen < 3 * YOUNG_THRESHOLD
        assert len(collected_young) >= 25
        # Python's own thresholds would have had a collection walk them all (gen 1 and 2 included).
        assert max(collected_young) < 3 * YOUNG_THRESHOLD


class _Node:
    def __init__(self) -> None:
        self.me = self                              # a reference cycle: only the collector frees it


def test_the_collector_is_restored_and_cycles_made_inside_are_collected_after():
    before = gc.get_threshold()
    with quiet_garbage_collector():
        cycle = _Node()
        in_cycle = weakref.ref(cycle)
        for _ in range(3):                          # collections that freeze the cycle
            [[i] for i in range(2 * YOUNG_THRESHOLD)]
            gc.collect(0)
        del cycle
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
    assert gc.collect() >= 1
    assert in_cycle() is None                       # this cycle itself, not just any garbage


def test_after_max_freezes_it_stops_freezing_and_collects_rarely(monkeypatch):
    monkeypatch.setattr(collector, "MAX_FREEZES", 3)
    with quiet_garbage_collector():
        for _ in range(5):
            gc.collect(0)
        frozen = gc.get_freeze_count()
        gc.collect(0)
        assert gc.get_freeze_count() == frozen
        assert gc.get_threshold() == collector._FALLBACK_THRESHOLDS
