"""The older runs of a report's window are summarized per period once, and kept: a period's point
is the mean, min and max of exactly the stored values of its runs, whether the summary was just
aggregated, combined from kept weeks or read back; the next report aggregates only the runs that
moved into the periods since; a store that cannot keep them still gets its report."""

from __future__ import annotations

import datetime as dt
import random
import sqlite3
import statistics
import threading
from pathlib import Path
from typing import Any

import pytest

from prober.reports.collect import load_window
from prober.store import Store
from tests.support.history import add_run

pytestmark = pytest.mark.unit

TARGETS = ("a", "b")


def _night(store: Store, night: int, rng: random.Random) -> None:
    for target in TARGETS:
        add_run(store, f"{target}{night:03d}", night, [
            {"name": "ttft_p50_ms", "value": rng.uniform(80, 120), "labels": {"concurrency": 1}, "unit": "ms"},
            {"name": "ttft_p50_ms", "value": rng.uniform(200, 400), "labels": {"concurrency": 4}, "unit": "ms"},
            {"name": "error_rate", "value": rng.choice([0.0, 0.01, None]), "labels": {}, "unit": "ratio"},
        ], target=target)


def _points(store: Store) -> dict[tuple[str, str, str, dt.datetime], tuple[int, float, float, float]]:
    """(target, name, labels, period start) -> (count, mean, low, high) of every period's summary."""
    window = load_window(store)
    return {(section.target, s.row["name"], str(s.row["labels"]), s.start): (s.row["count"], s.row["mean"],
                                                                             s.row["low"], s.row["high"])
            for section in window.sections.values() for s in section.summaries}


def _reference(store: Store) -> dict[tuple[str, str, str, dt.datetime], tuple[int, float, float, float]]:
    """The same from the stored metric rows, computed here: each period's runs are those its
    summary says it covers (load_window's periods), their values as stored."""
    window = load_window(store)
    found = {}
    for section in window.sections.values():
        by_run = {}
        for row in store.metric_history(target=section.target):
            by_run.setdefault(row["run_id"], []).append(row)
        starts = {run.id: run.started_at for run in section.runs}
        for summary in section.summaries:
            values = [row["value"] for run_id, rows in by_run.items()
                      if summary.start <= starts[run_id] < summary.end and run_id in starts
                      and run_id not in section.detailed_run_ids
                      for row in rows if row["name"] == summary.row["name"] and row["labels"] == summary.row["labels"]
                      and row["value"] is not None]
            found[(section.target, summary.row["name"], str(summary.row["labels"]), summary.start)] = (
                len(values), statistics.fmean(values), min(values), max(values))
    return found


def _same(points: dict[Any, tuple[int, float, float, float]], reference: dict[Any, tuple[int, float, float, float]]
          ) -> None:
    assert points.keys() == reference.keys()
    for key, (count, mean, low, high) in points.items():
        assert (count, low, high) == (reference[key][0], reference[key][2], reference[key][3]), key
        assert mean == pytest.approx(reference[key][1], rel=1e-12), key


def _aggregated_runs(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """The run sets the store is asked to aggregate from here on."""
    calls: list[tuple[str, ...]] = []
    real = Store.metric_summary

    def counted(self: Store, run_ids: Any, targets: Any, **kwargs: Any) -> list[dict[str, Any]]:
        calls.append(tuple(run_ids))
        return real(self, run_ids, targets, **kwargs)
    monkeypatch.setattr(Store, "metric_summary", counted)
    return calls


def test_kept_summaries_are_the_stored_values_and_only_new_weeks_are_aggregated(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch
                                                                                 ) -> None:
    rng = random.Random(5)
    with Store.open(f"sqlite:///{tmp_path / 'h.db'}") as store:
        for night in range(120):            # 17 weeks: the older runs make periods of two weeks
            _night(store, night, rng)
        calls = _aggregated_runs(store, monkeypatch)
        first = _points(store)
        assert calls                                             # aggregated by the database, and kept
        _same(first, _reference(store))
        assert len({key[3] for key in first}) >= 6

        calls.clear()
        assert _points(store) == first                           # read back as they were
        assert calls == []

        for night in range(120, 127):        # a week later: the week that left the newest runs is new
            _night(store, night, rng)
        calls.clear()
        later = _points(store)
        _same(later, _reference(store))
        newest_older = {run.id for section in load_window(store).sections.values()
                        for run in section.runs[:-14][-14:]}
        assert calls and all(set(run_ids) <= newest_older for run_ids in calls), calls


def test_a_store_that_cannot_keep_them_still_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "h.db"
    rng = random.Random(6)
    with Store.open(f"sqlite:///{path}") as store:
        for night in range(60):
            _night(store, night, rng)
        calls = _aggregated_runs(store, monkeypatch)
        # another writer holds the lock throughout (a run writing its samples, or a migration)
        locked, release = threading.Event(), threading.Event()

        def hold() -> None:
            conn = sqlite3.connect(path, timeout=0)
            conn.execute("BEGIN IMMEDIATE")
            locked.set()
            release.wait(60)
            conn.rollback()
            conn.close()
        holder = threading.Thread(target=hold)
        holder.start()
        try:
            locked.wait(10)
            points = _points(store)
        finally:
            release.set()
            holder.join()
        kept = sqlite3.connect(path).execute("SELECT count(*) FROM run_summaries").fetchone()[0]
        assert kept == 0 and calls
        _same(points, _reference(store))         # (the lock is gone: this read keeps them)
        calls.clear()
        assert _points(store) == points and calls == []
