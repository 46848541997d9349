"""The latency summary's TTFT split and its charts, from canned sample rows."""

import datetime as dt

import pytest

from prober.probes.latency import LatencyParams, LatencyProbe
from prober.probes.ttft_split import server_prefill_ms, ttft_split

pytestmark = pytest.mark.unit

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _row(level, ttft, timings=None, **extra):
    return {"probe": "latency", "labels": {"concurrency": level, "phase": "measure"}, "final": True,
            "error_type": None, "ttft_ms": ttft, "headers_ms": 1.0, "end_ms": ttft + 10,
            "chunk_offsets_ms": [ttft, ttft + 5, ttft + 10], "started_at": START,
            "extra": {**({"timings": timings} if timings is not None else {}), **extra}}


def test_the_split_is_ttft_minus_the_reported_prefill_and_only_where_reported():
    assert ttft_split(_row(1, 100.0, {"prompt_ms": 30.0})) == (70.0, 30.0)
    assert ttft_split(_row(1, 100.0)) is None
    for junk in ({"prompt_ms": "30"}, {"prompt_ms": -1}, {"prompt_ms": float("nan")}, {"prompt_ms": True}, [1]):
        assert server_prefill_ms(_row(1, 100.0, junk)) is None


def test_summarize_adds_split_metrics_per_level_when_the_server_reports_timings():
    rows = [_row(1, 50.0 + i, {"prompt_ms": 20.0}) for i in range(10)]
    rows += [_row(4, 150.0 + i, {"prompt_ms": 25.0}) for i in range(10)]
    rows += [_row(8, 400.0 + i) for i in range(10)]                  # a server without timings
    metrics = LatencyProbe().summarize(rows, LatencyParams(levels=[1, 4, 8]), run_id="r", target="t")
    values = {(m.name, m.labels.get("concurrency")): m for m in metrics}
    assert values[("prefill_p50_ms", 1)].value == 20.0
    assert values[("ttft_queue_p50_ms", 1)].value == pytest.approx(34.5)      # median of 30..39
    assert values[("ttft_queue_p50_ms", 4)].value == pytest.approx(129.5)
    assert values[("ttft_queue_p50_ms", 4)].ci_low is not None
    assert values[("ttft_queue_p99_ms", 4)].flags == ["interval_unbounded"]   # 10 requests cannot bound p99
    assert ("prefill_p50_ms", 8) not in values and ("ttft_queue_p50_ms", 8) not in values
    knee = values[("knee_concurrency", None)]
    assert (knee.value, knee.ci_low, knee.ci_high) == (4, 4, 4)


def test_charts_plot_ttft_and_itl_apart_against_concurrency_or_rate():
    probe = LatencyProbe()
    closed = [{"name": "ttft_p50_ms", "labels": {"concurrency": 1}}]
    assert [(c.title, c.x) for c in probe.charts(closed)] == [
        ("TTFT percentiles against concurrency", "concurrency"),
        ("Inter-token latency percentiles against concurrency", "concurrency")]
    opened = [{"name": "ttft_p50_ms", "labels": {"arrival": "poisson", "rate_rps": 2.0}},
              {"name": "prefill_p50_ms", "labels": {"arrival": "poisson", "rate_rps": 2.0}}]
    charts = probe.charts(opened)
    assert [c.x for c in charts] == ["rate_rps"] * 3
    assert charts[2].metrics == ("ttft_p50_ms", "ttft_queue_p50_ms", "prefill_p50_ms")
    assert {c.x_label for c in charts} == {"requests per second"}


def _open_row(rate, i, ttft, send_lag_ms=0.5):
    row = _row(0, ttft, {"prompt_ms": 5.0}, scheduled_offset_ms=i * 1000 / rate, send_lag_ms=send_lag_ms,
               inflight_at_send=1)
    row["labels"] = {"arrival": "poisson", "rate_rps": rate, "phase": "measure"}
    return row


def test_open_loop_rates_get_a_knee_with_its_interval_from_the_levels_the_client_kept():
    rows = [_open_row(1.0, i, 50.0 + i % 5) for i in range(20)]
    rows += [_open_row(2.0, i, 60.0 + i % 5) for i in range(20)]
    rows += [_open_row(4.0, i, 300.0 + i % 5) for i in range(20)]
    rows += [_open_row(8.0, i, 900.0 + i % 5, send_lag_ms=80.0) for i in range(20)]   # client-limited
    metrics = LatencyProbe().summarize(rows, LatencyParams(arrival="poisson", rates=[1, 2, 4, 8]),
                                       run_id="r", target="t")
    (knee,) = [m for m in metrics if m.name == "knee_rate_rps"]
    assert (knee.value, knee.ci_low, knee.ci_high, knee.n) == (4.0, 4.0, 4.0, 3)
    assert knee.labels == {"arrival": "poisson"}
    limited = {m.labels["rate_rps"]: m.value for m in metrics if m.name == "client_limited"}
    assert limited == {1.0: 0.0, 2.0: 0.0, 4.0: 0.0, 8.0: 1.0}
    assert not [m for m in metrics if m.name == "knee_concurrency"]


def _reasoning_row(ttft: float, answer: float | None) -> dict:
    return {"probe": "latency", "labels": {"concurrency": 1, "phase": "measure"}, "final": True,
            "error_type": None, "ttft_ms": ttft, "ttft_answer_ms": answer, "headers_ms": 1.0,
            "end_ms": (answer or ttft) + 10, "chunk_offsets_ms": [ttft, (answer or ttft) + 5], "extra": {}}


def test_latency_reports_ttft_answer_only_where_responses_reason_first():
    reasoning = [_reasoning_row(100.0 + i, 500.0 + 10 * i) for i in range(11)]
    metrics = LatencyProbe().summarize(reasoning, LatencyParams(levels=[1]), run_id="r", target="t")
    values = {m.name: m.value for m in metrics}
    assert values["ttft_p50_ms"] == pytest.approx(105.0)
    assert values["ttft_answer_p50_ms"] == pytest.approx(550.0)      # the median of 500..600
    assert {"ttft_answer_p90_ms", "ttft_answer_p99_ms"} <= set(values)
    assert {m.name for m in metrics} <= LatencyProbe.metric_names
    plain = [_reasoning_row(100.0 + i, 100.0 + i) for i in range(11)]
    names = {m.name for m in LatencyProbe().summarize(plain, LatencyParams(levels=[1]), run_id="r", target="t")}
    assert "ttft_p50_ms" in names and not any(name.startswith("ttft_answer") for name in names)
