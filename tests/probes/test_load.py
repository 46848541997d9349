"""The client's verdict on an open-loop level and the capacity bracket, on canned sample rows."""

import pytest

from prober.probes.base import MetricCollector
from prober.probes.latency import LatencyParams
from prober.probes.load import add_capacity, capacity_bracket, client_verdict, step_passes

pytestmark = pytest.mark.unit

PARAMS = LatencyParams(arrival="sweep", ttft_threshold_ms=100, itl_threshold_ms=20, error_rate_threshold=0.1)


def _row(i, *, gap_ms=10.0, lag_ms=1.0, wait_ms=None, ttft_ms=50.0, itl_ms=5.0, error=None):
    extra = {"scheduled_offset_ms": i * gap_ms, "send_lag_ms": lag_ms, "inflight_at_send": 1 + i % 3}
    if wait_ms is not None:
        extra["concurrency_wait_ms"] = wait_ms
    return {"ttft_ms": None if error else ttft_ms, "error_type": error, "extra": extra,
            "chunk_offsets_ms": [] if error else [ttft_ms + k * itl_ms for k in range(4)]}


def test_a_kept_schedule_is_not_client_limited():
    verdict = client_verdict([_row(i) for i in range(100)], PARAMS)
    assert verdict.achieved_rate_rps == pytest.approx(100.0) and verdict.scheduled_rate_rps == pytest.approx(100.0)
    assert not verdict.limited and not verdict.capped and max(verdict.inflight) == 3


def test_send_lag_p99_over_the_limit_makes_a_level_client_limited():
    # 2 of 100 requests 25 ms late put p99 over the 20 ms default; 1 of 100 leaves it under.
    late = {i: 25.0 for i in (10, 60)}
    assert client_verdict([_row(i, lag_ms=late.get(i, 1.0)) for i in range(100)], PARAMS).limited
    assert not client_verdict([_row(i, lag_ms=25.0 if i == 10 else 1.0) for i in range(100)], PARAMS).limited
    stricter = PARAMS.model_copy(update={"client_limited_send_lag_ms": 5.0})
    assert client_verdict([_row(i, lag_ms=6.0) for i in range(100)], stricter).limited


def test_a_send_rate_under_95_percent_of_the_schedules_is_client_limited_unless_the_cap_set_it():
    # Each send 0.6 ms later than the one before (59 ms late by the end): 100 scheduled per second,
    # 94 sent; limited by the rate alone once the lag limit is lifted out of the way.
    drifting = [_row(i, lag_ms=0.6 * i) for i in range(100)]
    assert client_verdict(drifting, PARAMS).achieved_rate_rps == pytest.approx(100 / 1.06, rel=0.01)
    assert client_verdict(drifting, PARAMS.model_copy(update={"client_limited_send_lag_ms": 100.0})).limited
    # The cap held each request 6 ms longer than the one before: 99 sends over 990 + 594 ms.
    capped = [_row(i, wait_ms=6.0 * i) for i in range(100)]
    verdict = client_verdict(capped, PARAMS)
    assert verdict.capped and verdict.achieved_rate_rps == pytest.approx(62.5) and not verdict.limited


def test_a_step_passes_only_within_every_threshold_and_with_the_schedule_kept():
    assert step_passes([_row(i) for i in range(50)], PARAMS)
    assert not step_passes([_row(i, ttft_ms=150.0 if i == 49 else 50.0) for i in range(50)], PARAMS)
    assert not step_passes([_row(i, itl_ms=25.0) for i in range(50)], PARAMS)
    errors = [_row(i, error="overloaded" if i < 6 else None) for i in range(50)]
    assert not step_passes(errors, PARAMS)                       # 12% errors against 10%
    assert step_passes(errors[1:], PARAMS.model_copy(update={"error_rate_threshold": 0.15}))
    assert not step_passes([_row(i, lag_ms=40.0) for i in range(50)], PARAMS)
    assert not step_passes([], PARAMS)


def test_the_bracket_is_the_highest_pass_below_the_lowest_failure():
    assert capacity_bracket({10: True, 20: True, 40: False, 30: True, 35: False}) == (30, 35)
    assert capacity_bracket({10: True, 20: True}) == (20, None)
    assert capacity_bracket({10: False, 5: False}) is None
    # A pass above a failure (noise near capacity) does not lift the bracket over that failure.
    assert capacity_bracket({10: True, 20: False, 30: True}) == (10, 20)


def test_capacity_metric_carries_its_bracket_and_the_client_limited_flag_of_its_deciding_step():
    good = [_row(i) for i in range(50)]
    slow = [_row(i, ttft_ms=500.0) for i in range(50)]
    starved = [_row(i, lag_ms=40.0) for i in range(50)]

    def capacity(steps):
        collected = MetricCollector(run_id="r", target="t", probe="latency")
        add_capacity(collected, steps, PARAMS)
        (metric,) = collected.metrics
        return metric.value, metric.ci_low, metric.ci_high, metric.flags

    assert capacity({10.0: good, 20.0: good, 40.0: slow, 30.0: slow}) == (20.0, 20.0, 30.0, None)
    assert capacity({10.0: good, 20.0: starved}) == (10.0, 10.0, 20.0, ["client_limited"])
    assert capacity({10.0: good, 20.0: slow, 40.0: starved}) == (10.0, 10.0, 20.0, None)
    assert capacity({10.0: slow}) == (None, None, None, None)


def test_capacity_is_a_drift_family_whose_fall_is_bad_and_a_flagged_capacity_is_not_judged():
    from prober.alerting.run_values import run_values
    from prober.core.probe_registry import metric_family

    family = metric_family("latency", "capacity_rps")
    assert family is not None and family.kind == "latency" and family.bad_direction == -1
    row = {"target": "t", "probe": "latency", "name": "capacity_rps", "value": 40.0, "n": 6, "labels": {},
           "ci_low": 40.0, "ci_high": 44.0, "unit": "requests/s"}
    assert [identity[2] for identity in run_values([row])] == ["capacity_rps"]
    assert run_values([{**row, "flags": ["client_limited"]}]) == {}
