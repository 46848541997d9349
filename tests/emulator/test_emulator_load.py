"""512 concurrent streams against `serve` in its own process: all complete, timing holds.

The emulator runs as `prober emulate` would run it (a separate process), so the 512 clients do
not share its event loop; its ground truth then shows its own lateness only. That lateness is
bounded against a second emulator process with no first-token delay, given the same 512 streams
in turns with the first (tests/support/timing.py): it does all the same work per stream, so only
the scheduling of the delay differs. A fixed 3 ms failed on another 2-core machine (p50 3.1 ms,
p99 10.0 ms there), and a bare asyncio server did not carry the emulator's own work (4 ms against
the emulator's 68 ms here under load).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.emulator import anthropic_body, openai_body, raw_request, run
from tests.support.timing import assert_on_time, timing_sensitive

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]
STREAMS = 512
FIRST_TOKEN_DELAY_MS = 100
ROUNDS = 2
# With the delay, all 512 requests are parsed before their first tokens are due, so a first token
# waits only for the other first tokens' writes; the untimed twin's first tokens also wait for the
# parsing of the requests arriving with them. So the delayed median is a fraction of the twin's:
# measured here (1 December 2026), 0.03 to 0.12 of it quiet (load 1 to 3: 0.9 to 1.4 ms against 9 to
# 29 ms) and under two busy loops (load 5 to 7: 1.6 to 2.7 ms against 23 to 32 ms). A quarter keeps 2x
# headroom over the worst of those, and still fails the regressions that matter: the loop blocked
# 1 ms per frame (median 846 ms against the twin's 1129) or first tokens 30 ms late (30 ms against
# 2 to 8 ms allowed). The worst is one event, and one lost timeslice at the deadline delays every
# first token queued behind it: measured 0.1 to 0.5 of the twin's worst in 8 runs, 1.4 of it once
# under two busy loops; so twice the twin's worst (the median above is what catches regressions).
MEDIAN_OF_UNTIMED = 0.25
WORST_OF_UNTIMED = 2


def _raise_priority() -> None:
    """The emulator is the reference clock here: let it win the CPU over other work on the machine
    (other test runs share its 2 cores). Without the privilege to do so, run at normal priority."""
    with contextlib.suppress(OSError):
        os.nice(-10)


@contextlib.contextmanager
def _server_process(code: str, announces: str):
    """A Python server in its own process, at raised priority; yields (port, process)."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env, cwd=REPO, preexec_fn=_raise_priority)
    try:
        line = process.stdout.readline()
        assert announces in line, line + process.stderr.read()
        yield int(line.split(announces)[1].split()[0]), process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)


@contextlib.contextmanager
def _emulator_process(tmp_path: Path, first_token_delay_ms: int):
    scenario = tmp_path / f"load-{first_token_delay_ms}.toml"
    scenario.write_text(f"slots = {STREAMS}\nfirst_token_delay_ms = {first_token_delay_ms}\n"
                        "prefill_ms_per_token = 0\ndecode_tokens_per_s = 50\noutput_tokens = 10\n")
    with _server_process(f"from prober.emulator import serve; serve('127.0.0.1', 0, {str(scenario)!r})",
                         "listening on http://127.0.0.1:") as served:
        yield served


@pytest.fixture
def served(tmp_path):
    with _emulator_process(tmp_path, FIRST_TOKEN_DELAY_MS) as served:
        yield served


@pytest.fixture
def untimed(tmp_path):
    """The reference: the same emulator with no first-token delay."""
    with _emulator_process(tmp_path, 0) as (port, _):
        yield port


async def _burst(port: int) -> list:
    return await asyncio.gather(*(_one_stream(port, i) for i in range(STREAMS)))


async def _one_stream(port: int, i: int):
    if i % 2:
        return await raw_request(port, "POST", "/v1/messages", anthropic_body(f"stream {i}"))
    return await raw_request(port, "POST", "/v1/chat/completions", openai_body(f"stream {i}"))


def _check(responses: list, truth: list[dict], delay_ms: int) -> list[float]:
    """Each stream complete on its protocol; the ground truth's first-token lateness of each."""
    for i, response in enumerate(responses):
        assert response.status == 200 and response.complete, i
        if i % 2:
            names = [name for name, _ in response.events()]
            assert names.count("content_block_delta") == 10 and names[-1] == "message_stop"
        else:
            datas = [data for _, data in response.events()]
            assert len(datas) == 1 + 10 + 2 + 1 and datas[-1] == "[DONE]"
            assert json.loads(datas[-2])["usage"]["completion_tokens"] == 10
    assert len(truth) == STREAMS
    assert max(record["in_flight_at_arrival"] for record in truth) >= STREAMS // 2   # really concurrent
    assert all(record["queue_wait_ms"] == 0 and record["tokens_sent"] == 10 for record in truth)
    assert all(record["scheduled_ttft_ms"] == pytest.approx(delay_ms) for record in truth)
    return [record["ttft_ms"] - record["scheduled_ttft_ms"] for record in truth]


async def _measured_burst(port: int, delay_ms: int) -> list[float]:
    await raw_request(port, "POST", "/_emulator/reset")
    responses = await _burst(port)
    truth = (await raw_request(port, "GET", "/_emulator/ground_truth")).json()
    return _check(responses, truth, delay_ms)


async def _load_run(port: int, untimed_port: int) -> tuple[list[float], list[float]]:
    """STREAMS streams at once (half per protocol), in turns to the emulator and to its untimed
    twin, ROUNDS times each, so that both see the same load from the rest of the machine; returns
    the first tokens' lateness of each.

    An unmeasured burst to each goes first, so that neither server's first-time costs (imports,
    caches, the allocator growing to hold 512 connections) land on a measured one: measured, the
    emulator's first burst ran 5 to 10 times as late as its second."""
    await _burst(port)
    await _burst(untimed_port)
    lateness_ms: list[float] = []
    reference_ms: list[float] = []
    for _ in range(ROUNDS):
        lateness_ms += await _measured_burst(port, FIRST_TOKEN_DELAY_MS)
        reference_ms += await _measured_burst(untimed_port, 0)
    return lateness_ms, reference_ms


@timing_sensitive
def test_512_concurrent_streams_complete_on_time(served, untimed) -> None:
    port, process = served
    lateness_ms, reference_ms = run(_load_run(port, untimed))
    assert min(lateness_ms) >= 0      # never early
    assert_on_time(lateness_ms, reference_ms, f"the emulator's first tokens of {STREAMS} concurrent streams",
                   median_ratio=MEDIAN_OF_UNTIMED, worst_ratio=WORST_OF_UNTIMED)

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0
