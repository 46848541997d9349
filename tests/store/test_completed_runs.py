"""Store.completed_runs: the baseline candidates of several targets, read in one pass over the
runs, are each target's own (a failed target, a target still recorded as running in a run that
ended, a run stored before per-target status, another suite or site)."""

from __future__ import annotations

import datetime as dt
import os
import socket
from pathlib import Path

import pytest

from prober.core.records import Run
from prober.store import Store

pytestmark = pytest.mark.unit

T0 = dt.datetime(2026, 3, 1, 2, 0, tzinfo=dt.UTC)


def _run(store: Store, night: int, statuses: dict[str, str] | None, *, suite: str = "nightly",
         site: str = "here") -> None:
    """A complete run on `night`; `statuses`: each target's own status as recorded ("running": it
    never finished), None for a run stored before per-target status (targets a and b)."""
    started = T0 + dt.timedelta(days=night)
    targets = list(statuses) if statuses is not None else ["a", "b"]
    store.create_run(Run(id=f"n{night}", suite=suite, started_at=started, prober_version="test", config_hash="h",
                         host=socket.gethostname(), pid=os.getpid(), targets=targets, site=site))
    for target, status in (statuses or {}).items():
        store.start_target(f"n{night}", target, "h", [])
        if status != "running":
            store.finish_target(f"n{night}", target, status)
    store.finish_run(f"n{night}", "complete", started + dt.timedelta(minutes=5))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store.open(f"sqlite:///{tmp_path / 'candidates.db'}")
    _run(store, 0, None)
    _run(store, 1, {"a": "complete", "b": "failed", "c": "complete"})
    _run(store, 2, {"a": "complete", "b": "running", "c": "complete"})
    _run(store, 3, {"a": "complete", "b": "complete", "c": "complete"}, suite="other")
    _run(store, 4, {"a": "complete", "b": "complete", "c": "complete"}, site="elsewhere")
    _run(store, 5, {"a": "complete", "b": "complete", "c": "complete"})
    return store


EXPECTED = {"a": ["n5", "n2", "n1", "n0"], "b": ["n5", "n0"], "c": ["n5", "n2", "n1"]}


@pytest.mark.parametrize("limit", [1, 2, 3, 10])
def test_each_target_gets_the_newest_runs_it_completed_of_the_suite_and_site(store: Store, limit: int) -> None:
    tonight = T0 + dt.timedelta(days=6)
    together = store.completed_runs("nightly", ["a", "b", "c"], tonight, limit, site="here")
    assert {target: [run["id"] for run in runs] for target, runs in together.items()} == \
        {target: ids[:limit] for target, ids in EXPECTED.items()}
    for target in ("a", "b", "c"):
        alone = store.completed_runs("nightly", [target], tonight, limit, site="here")[target]
        assert [run["id"] for run in alone] == EXPECTED[target][:limit]
    assert together["a"][0]["target_status"]["b"]["status"] == "complete"
    store.close()


def test_runs_started_at_or_after_the_judged_run_and_other_sites_are_not_candidates(store: Store) -> None:
    found = store.completed_runs("nightly", ["a"], T0 + dt.timedelta(days=2), 10)
    assert [run["id"] for run in found["a"]] == ["n1", "n0"]
    anywhere = store.completed_runs("nightly", ["a"], T0 + dt.timedelta(days=6), 10)
    assert [run["id"] for run in anywhere["a"]] == ["n5", "n4", "n2", "n1", "n0"]
    store.close()
