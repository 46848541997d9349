"""Trace replay (arrival = "trace") against `prober emulate`: the emulator receives each request of
the trace at its time-scaled timestamp, with the trace's own lengths."""

import asyncio
import json

import pytest

from prober.core import stats
from tests.support.emulated import run_suite_on_emulator
from tests.support.timing import CLIENT_MEDIAN_RATIO, median_allowed, reference_lateness, timing_sensitive

pytestmark = pytest.mark.emulator

SCENARIO = "first_token_delay_ms = 10\nprefill_ms_per_token = 0\ndecode_tokens_per_s = 500\nslots = 16\n"
# Bursts and lulls, in the Mooncake layout: (timestamp ms, input length, output length).
TRACE = [(0, 30, 3), (0, 40, 4), (40, 50, 5), (300, 60, 6), (320, 70, 2), (330, 80, 3), (1200, 90, 4),
         (1210, 100, 5), (1600, 110, 6), (1610, 120, 2), (1620, 130, 3), (2400, 140, 4)]
SCALE = 0.5


@timing_sensitive       # arrival times carry the client's and the emulator's overheads on shared cores
def test_a_replayed_trace_arrives_on_its_scaled_timestamps_with_its_lengths(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": [1]}) + "\n"
                             for t, i, o in TRACE))
    reference = asyncio.run(reference_lateness(0.01, len(TRACE), concurrent=3)).client
    rows, metrics, truth = run_suite_on_emulator(tmp_path, SCENARIO, "openai", "latency", {
        "arrival": "trace", "trace_file": str(trace), "time_scale": SCALE, "warmup": 2})
    assert all(r["error_type"] is None for r in rows)
    assert sum(r["labels"]["phase"] == "warmup" for r in rows) == 2
    rows = [r for r in rows if r["labels"]["phase"] == "measure"]
    assert len(rows) == len(TRACE)
    by_line = {int(r["extra"]["shape"]["source"].rpartition(":")[2]): r for r in rows}
    late = []
    for line, (timestamp, inputs, outputs) in enumerate(TRACE, start=1):
        row = by_line[line]
        record = truth[row["request_id"]]
        assert row["extra"]["scheduled_offset_ms"] == pytest.approx(timestamp * SCALE)
        assert row["extra"]["shape"]["input_tokens"] == inputs
        assert record["output_tokens"] == outputs
        # When the emulator got it against when the trace says (scaled), on the emulator's clock.
        late.append(record["arrived_mono_ns"] / 1e6 - timestamp * SCALE)
    # The replay's start is the common origin: what is left is each arrival's own deviation (the
    # first request also pays for opening the first connection).
    typical = stats.median(late)
    deviation = [abs(x - typical) for x in late]
    allowed = median_allowed(reference, CLIENT_MEDIAN_RATIO)
    assert stats.median(deviation) <= allowed, (deviation, reference)
    # Unscaled, the last request would come 1,200 ms later than it does: far outside this.
    assert max(deviation) <= max(4 * allowed, 100.0), deviation
    labels = {m["name"]: m["labels"] for m in metrics}
    assert labels["ttft_p50_ms"] == {"arrival": "trace", "rate_rps": round((len(TRACE) - 1) / (2.4 * SCALE), 4)}
    # The client's verdict is taken on the replay as on any open-loop level (its value depends on
    # this machine's load: not asserted), against the trace's own scaled rate.
    value = {m["name"]: m["value"] for m in metrics}
    assert value["scheduled_rate_rps"] == pytest.approx((len(TRACE) - 1) / (2.4 * SCALE))
    assert "client_limited" in value and "send_lag_p99_ms" in value


def test_trace_arrival_and_trace_file_go_together():
    from pydantic import ValidationError

    from prober.probes.latency import LatencyParams

    with pytest.raises(ValidationError, match="give both or neither"):
        LatencyParams.model_validate({"arrival": "trace"})
