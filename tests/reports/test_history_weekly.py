"""`prober history` over a long window: one row per ISO week and series (prober/reports/history.weekly)."""

from __future__ import annotations

import datetime as dt

import pytest

from prober.reports.history import weekly

pytestmark = pytest.mark.unit

MONDAY = dt.datetime(2026, 3, 2, 2, 0, tzinfo=dt.UTC)


def _row(day: int, value: float | None, status: str = "complete", level: int = 1) -> dict:
    return {"run_started_at": MONDAY + dt.timedelta(days=day), "suite": "nightly", "target": "t",
            "labels": {"concurrency": level}, "unit": "ms", "value": value, "run_status": status}


def test_each_week_and_series_gets_min_median_max_of_its_complete_runs() -> None:
    rows = [_row(0, 30.0), _row(1, 10.0), _row(2, 20.0), _row(3, 999.0, status="failed"), _row(6, None),
            _row(7, 5.0), _row(7, 50.0, level=16)]
    weeks = weekly(rows)
    assert [(w.week.isoformat(), w.labels, w.runs, w.not_complete, w.low, w.median, w.high) for w in weeks] == [
        ("2026-03-02", "concurrency=1", 5, 1, 10.0, 20.0, 30.0),
        ("2026-03-09", "concurrency=1", 1, 0, 5.0, 5.0, 5.0),
        ("2026-03-09", "concurrency=16", 1, 0, 50.0, 50.0, 50.0),
    ]


def test_a_week_without_a_complete_value_has_no_figures() -> None:
    (week,) = weekly([_row(0, 999.0, status="interrupted")])
    assert (week.runs, week.not_complete, week.low, week.median, week.high) == (1, 1, None, None, None)
