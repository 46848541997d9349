"""512 concurrent streams against `serve` in its own process: all complete, timing holds.

The emulator runs as `prober emulate` would run it (a separate process), so the 512 clients do
not share its event loop; its ground truth then shows its own lateness only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.emulator import anthropic_body, openai_body, raw_request, run, timing_sensitive

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[1]
STREAMS = 512
FIRST_TOKEN_DELAY_MS = 100


def _raise_priority() -> None:
    """The emulator is the reference clock here: let it win the CPU over other work on the machine
    (other test runs share its 2 cores). Without the privilege to do so, run at normal priority."""
    with contextlib.suppress(OSError):
        os.nice(-10)


@pytest.fixture
def served(tmp_path):
    scenario = tmp_path / "load.toml"
    scenario.write_text(f"slots = {STREAMS}\nfirst_token_delay_ms = {FIRST_TOKEN_DELAY_MS}\n"
                        "prefill_ms_per_token = 0\ndecode_tokens_per_s = 50\noutput_tokens = 10\n")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process = subprocess.Popen(
        [sys.executable, "-c", f"from prober.emulator import serve; serve('127.0.0.1', 0, {str(scenario)!r})"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO, preexec_fn=_raise_priority)
    try:
        line = process.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, line + process.stderr.read()
        port = int(line.split("http://127.0.0.1:")[1].split()[0])
        yield port, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)


async def _load_run(port: int) -> list[dict]:
    """Open STREAMS streams at once (half per protocol); check each one; return the ground truth."""
    async def one(i: int):
        if i % 2:
            return await raw_request(port, "POST", "/v1/messages", anthropic_body(f"stream {i}"))
        return await raw_request(port, "POST", "/v1/chat/completions", openai_body(f"stream {i}"))

    await raw_request(port, "POST", "/_emulator/reset")
    responses = await asyncio.gather(*(one(i) for i in range(STREAMS)))
    for i, response in enumerate(responses):
        assert response.status == 200 and response.complete, i
        if i % 2:
            names = [name for name, _ in response.events()]
            assert names.count("content_block_delta") == 10 and names[-1] == "message_stop"
        else:
            datas = [data for _, data in response.events()]
            assert len(datas) == 1 + 10 + 2 + 1 and datas[-1] == "[DONE]"
            assert json.loads(datas[-2])["usage"]["completion_tokens"] == 10
    truth = (await raw_request(port, "GET", "/_emulator/ground_truth")).json()
    assert len(truth) == STREAMS
    assert max(record["in_flight_at_arrival"] for record in truth) >= STREAMS // 2   # really concurrent
    assert all(record["queue_wait_ms"] == 0 and record["tokens_sent"] == 10 for record in truth)
    assert all(record["scheduled_ttft_ms"] == pytest.approx(FIRST_TOKEN_DELAY_MS) for record in truth)
    return truth


@timing_sensitive
def test_512_concurrent_streams_complete_on_time(served) -> None:
    port, process = served
    truth = run(_load_run(port))
    lateness_ms = sorted(record["ttft_ms"] - record["scheduled_ttft_ms"] for record in truth)
    assert lateness_ms[0] >= 0      # never early
    p50, p99 = statistics.median(lateness_ms), lateness_ms[int(0.99 * STREAMS)]
    assert p50 < 3 and p99 < 10, f"TTFT lateness p50 {p50:.1f} ms, p99 {p99:.1f} ms"

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0
