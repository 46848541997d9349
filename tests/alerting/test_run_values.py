"""A run's drift values kept in the store (prober/alerting/run_values.py) give the drift tests the
same verdicts as values derived from the metric rows; the post-run evaluation keeps them for
finished runs only, and values of another format are derived again."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from prober.alerting import run_values
from prober.alerting.drift import drift_for_run
from prober.core.config import DriftConfig
from prober.store import Store
from prober.store.schema import run_values as run_values_table
from tests.support.history import nightly_template_store

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import history_scale as bench

END = dt.datetime(2026, 6, 30, 12, tzinfo=dt.UTC)
CONFIG = DriftConfig(baseline_runs=6, min_baseline_runs=3)


def _kept(store: Store) -> dict[tuple[str, str], str]:
    with store.engine.connect() as conn:
        return {(row.run_id, row.target): row.format for row in conn.execute(sa.select(run_values_table))}


@pytest.mark.unit
def test_kept_values_give_the_same_tests_as_the_metric_rows(tmp_path: Path) -> None:
    template_url = f"sqlite:///{tmp_path / 'template.db'}"
    nightly_template_store(template_url, levels=(1, 4), requests_per_level=8)
    url = f"sqlite:///{tmp_path / 'history.db'}"
    bench.write_history(url, 8, 2, bench.load_template(template_url), end=END)
    with Store.open(url) as store:
        newest = store.list_runs(limit=1, suite="nightly", counts=False)[0]
        derived = drift_for_run(store, newest, CONFIG)
        assert derived.tests and _kept(store) == {}                  # only the post-run evaluation keeps

        kept = drift_for_run(store, newest, CONFIG, keep_values=True)
        rows = _kept(store)
        # tonight's run and its baselines, for both targets, in this code's format
        assert {run_id for run_id, _ in rows} >= {newest["id"]} and {t for _, t in rows} == {"t00", "t01"}
        assert set(rows.values()) == {run_values.FORMAT}
        read = drift_for_run(store, newest, CONFIG)
        assert [repr(t) for t in derived.tests] == [repr(t) for t in kept.tests] == [repr(t) for t in read.tests]
        assert derived.not_tested == read.not_tested

        # values of another format are not read: derived again, and replaced when kept
        with store.engine.begin() as conn:
            conn.execute(run_values_table.update().values(format="0.0.0/0", body='{"nightly": []}'))
        assert [repr(t) for t in drift_for_run(store, newest, CONFIG).tests] == [repr(t) for t in derived.tests]
        drift_for_run(store, newest, CONFIG, keep_values=True)
        assert set(_kept(store).values()) == {run_values.FORMAT}

        # a run still running is not kept: its rows may grow
        with store.engine.begin() as conn:
            conn.execute(run_values_table.delete())
        drift_for_run(store, {**newest, "status": "running"}, CONFIG, keep_values=True)
        assert newest["id"] not in {run_id for run_id, _ in _kept(store)} and _kept(store)


@pytest.mark.unit
def test_encoded_values_decode_to_what_was_derived() -> None:
    rows = [{"run_id": "r", "entry": "latency", "probe": "latency", "name": "ttft_p50_ms", "labels": {"concurrency": c},
             "value": 100.0 * c, "ci_low": 90.0, "n": 16, "unit": "ms", "flags": None} for c in (1, 4)]
    rows += [{"run_id": "r", "entry": "latency", "probe": "latency", "name": "error_rate", "labels": {"concurrency": 1},
              "value": 0.25, "ci_low": 0.1, "n": 16, "unit": "ratio", "flags": None}]
    values = run_values.run_values(rows)
    assert len(values) >= 2
    assert run_values.decode(run_values.encode({"latency": values})) == {"latency": values}
