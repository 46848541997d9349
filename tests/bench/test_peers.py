"""The peers' result readers (bench/peers.py) on their real exports: trimmed copies of what
guidellm 0.8.1 (its JSON report) and aiperf 0.13.0 (profile_export.jsonl) wrote for the bench's
server, with the local tokenizer, in tests/data/peers/."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import peers

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parents[1] / "data" / "peers"


def test_guidellm_report_gives_ttft_send_times_and_lag_against_its_schedule(tmp_path):
    shutil.copy(DATA / "guidellm.json", tmp_path / "guidellm.json")
    requests = json.loads((DATA / "guidellm.json").read_text())["benchmarks"][0]["requests"]["successful"]
    result = peers._READERS["guidellm"](tmp_path)
    assert result["ttft_ms"] == [r["time_to_first_token_ms"] for r in requests]
    assert 100 < min(result["ttft_ms"]) < 200                # the server's first token is at 100 ms
    assert result["sent_ns"] == sorted(round(r["info"]["timings"]["request_start"] * 1e9) for r in requests)
    first = requests[0]["info"]["timings"]
    assert result["send_lag_ms"][0] == pytest.approx(1e3 * (first["request_start"] - first["targeted_start"]))
    assert result["errors"] == []


def test_aiperf_records_give_ttft_send_times_lag_and_errors(tmp_path):
    lines = (DATA / "profile_export.jsonl").read_text().splitlines()
    failed = json.loads(lines[0])
    failed["error"] = {"code": 500, "type": "HTTPError", "message": "server error"}
    export = tmp_path / "aiperf" / "run"
    export.mkdir(parents=True)
    (export / "profile_export.jsonl").write_text("\n".join(lines + [json.dumps(failed)]) + "\n")
    records = [json.loads(line) for line in lines]
    result = peers._READERS["aiperf"](tmp_path)
    assert result["ttft_ms"] == [r["metrics"]["time_to_first_token"]["value"] for r in records]
    assert result["sent_ns"] == sorted(r["metadata"]["request_start_ns"] for r in records)
    assert result["send_lag_ms"] == pytest.approx(
        [(r["metadata"]["request_start_ns"] - r["metadata"]["credit_issued_ns"]) / 1e6 for r in records])
    assert len(result["errors"]) == 1 and "server error" in result["errors"][0]


def test_a_missing_peer_or_tokenizer_is_a_row_that_says_so():
    assert peers.run_peer("guidellm", None, "http://127.0.0.1:1", 10, 10, "m", None) == {"unavailable": "not installed"}
    assert peers.run_peer("aiperf", sys.executable, "http://127.0.0.1:1", 10, 10, "m", None)["unavailable"].startswith(
        "failed: no local tokenizer")
