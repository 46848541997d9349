"""The latency suite's open-loop levels against `prober emulate`, checked against its ground truth."""

import pytest

from prober.core.config import ProberConfig
from prober.runner import Runner
from probes.arrivals import schedule
from store import Store
from tests.support.emulated import emulator_process, ground_truth
from tests.support.timing import timing_sensitive

pytestmark = pytest.mark.emulator

# 8 slots, 30 ms to the first token, 5 more tokens 10 ms apart: a request holds its slot 80 ms, so
# the emulator serves 8 / 0.08 = 100 requests per second.
SCENARIO = ("first_token_delay_ms = 30\nprefill_ms_per_token = 0\ndecode_tokens_per_s = 100\n"
            "output_tokens = 6\nslots = 8\n")
OPEN_LOOP = {"requests_per_level": 40, "warmup": 2, "max_tokens": 6, "input_tokens": 16, "seed": 11}


def _config(tmp_path, base_url):
    return ProberConfig.model_validate({
        "store": {"url": f"sqlite:///{tmp_path}/prober.db"},
        "runner": {"progress": False},
        "targets": {"emu": {"protocol": "openai", "base_url": base_url, "model": "emulator-1"}},
    })


def _stored(tmp_path, run_id):
    store = Store.open(f"sqlite:///{tmp_path}/prober.db")
    try:
        return store.samples(run_id), store.metrics(run_id)
    finally:
        store.close()


def _run(tmp_path, scenario, overrides):
    with emulator_process(tmp_path, scenario) as base_url:
        result = Runner(_config(tmp_path, base_url)).run("latency", ["emu"], overrides)
        truth = ground_truth(base_url)
    assert result.exit_code == 0, result.problems
    rows, metrics = _stored(tmp_path, result.run_id)
    return rows, metrics, truth


@pytest.mark.parametrize("arrival", ["constant", "poisson"])
@timing_sensitive     # the emulator and the client share 2 cores with the rest of the machine
def test_open_loop_below_capacity_ttft_matches_ground_truth_per_request(tmp_path, arrival):
    rows, metrics, truth = _run(tmp_path, SCENARIO, {**OPEN_LOOP, "arrival": arrival, "rates": [20.0]})
    measured = [r for r in rows if r["labels"]["phase"] == "measure"]
    assert len(measured) == 40 and all(r["error_type"] is None for r in measured)
    assert {tuple(sorted(r["labels"].items())) for r in measured} == {
        (("arrival", arrival), ("phase", "measure"), ("rate_rps", 20.0))}
    for row in measured:
        expected = truth[row["request_id"]]["ttft_ms"]
        assert abs(row["ttft_ms"] - expected) <= 5.0, \
            f"request {row['request_index']}: measured {row['ttft_ms']:.1f} ms, the emulator's {expected:.1f} ms"
    # The schedule is stored with the run: each request's offset is the seeded schedule's.
    stored = sorted(r["extra"]["scheduled_offset_ms"] for r in measured)
    again = schedule(arrival, 20.0, seed=f"11:{arrival}:20.0:measure", count=40)
    assert stored == pytest.approx([t * 1000 for t in again], abs=1e-3)
    assert all(r["extra"]["send_lag_ms"] >= 0 for r in measured)
    by_name = {m["name"]: m for m in metrics if m["labels"] == {"arrival": arrival, "rate_rps": 20.0}}
    assert by_name["client_limited"]["value"] == 0 and not by_name["ttft_p50_ms"]["flags"]
    assert by_name["send_lag_p99_ms"]["value"] < 10
    assert by_name["achieved_rate_rps"]["value"] == pytest.approx(by_name["scheduled_rate_rps"]["value"], rel=0.05)
    assert by_name["inflight_max"]["value"] <= 8    # 20/s x 80 ms: 1.6 in flight on average


def test_open_loop_above_capacity_queues_and_the_cap_waits_are_recorded(tmp_path):
    # 150 requests per second against 100 of capacity: the queue grows by a third of a request every
    # 20 ms, so the last requests wait well over a service time for a slot, and TTFT shows it.
    rows, metrics, truth = _run(tmp_path, SCENARIO, {**OPEN_LOOP, "arrival": "constant", "rates": [50.0, 150.0],
                                                     "requests_per_level": 60})
    ttft = {m["labels"]["rate_rps"]: m["value"] for m in metrics if m["name"] == "ttft_p99_ms"}
    assert ttft[150.0] > ttft[50.0] + 80
    queued = [truth[r["request_id"]]["queue_wait_ms"] for r in rows
              if r["labels"]["rate_rps"] == 150.0 and r["labels"]["phase"] == "measure"]
    assert max(queued) > 80
    # The client kept its schedule all the same: queueing is the server's.
    limited = {m["labels"]["rate_rps"]: m["value"] for m in metrics if m["name"] == "client_limited"}
    assert limited == {50.0: 0.0, 150.0: 0.0}


def test_max_concurrency_holds_requests_back_and_records_the_wait(tmp_path):
    rows, metrics, _ = _run(tmp_path, SCENARIO, {**OPEN_LOOP, "arrival": "constant", "rates": [100.0],
                                                 "max_concurrency": 2, "warmup": 0})
    assert len(rows) == 40
    assert max(r["extra"]["inflight_at_send"] for r in rows) <= 2
    waits = [r["extra"].get("concurrency_wait_ms", 0) for r in rows]
    # 2 in flight for 80 ms each serve 25 a second against 100 due: the 40th waits about 1.2 s.
    assert max(waits) > 800
    by_name = {m["name"]: m["value"] for m in metrics if m["labels"].get("rate_rps") == 100.0}
    assert by_name["concurrency_capped"] == 1 and by_name["client_limited"] == 0
    assert by_name["inflight_max"] == 2
