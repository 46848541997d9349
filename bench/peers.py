"""Peer load generators (guidellm, aiperf) at an open-loop rate, for bench/open_loop.py.

Each peer runs as its own console script from a virtual environment of its own (never prober's
lock), against the same fixed-delay server, at the same Poisson rate and request count. What is
read back: the TTFTs it reported (overhead = TTFT - 100 ms) and its achieved request rate. A peer
that is not installed, or that fails, gives a row saying so instead of figures.

Both build synthetic prompts with a tokenizer they download (guidellm from the Hugging Face hub,
aiperf's "builtin" one a tiktoken file): on a machine without internet access both stop there, and
the row says so. The result readers below follow the peers' documented export layouts and have not
been exercised on such a machine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

PEER_TIMEOUT_S = 300.0


def run_peer(name: str, script: str | None, base_url: str, rate: float, count: int, model: str) -> dict[str, Any]:
    if not script or not (Path(script).exists() or shutil.which(script)):
        return {"unavailable": "not installed"}
    with tempfile.TemporaryDirectory(prefix=f"prober-bench-{name}-") as out:
        command = _COMMANDS[name](script, base_url, rate, count, model, Path(out))
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=PEER_TIMEOUT_S, cwd=out)
        except subprocess.TimeoutExpired:
            return {"unavailable": f"failed: no result within {PEER_TIMEOUT_S:g}s"}
        if done.returncode != 0:
            return {"unavailable": f"failed (exit {done.returncode}): {_first_error(done, Path(out))[:200]}"}
        try:
            return _READERS[name](Path(out))
        except (OSError, ValueError, KeyError, IndexError) as exc:
            return {"unavailable": f"failed: unreadable result ({type(exc).__name__}: {exc})"}


def _first_error(done: subprocess.CompletedProcess[str], out: Path) -> str:
    """The first line that names an error, in the peer's output or its log files (aiperf says only
    where its log is); else its last line. A peer that needs a tokenizer from the internet fails here."""
    texts = [done.stderr, done.stdout] + [log.read_text(errors="replace") for log in sorted(out.rglob("*.log"))]
    lines = [line.strip() for text in texts for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines[-1:] or ["no output"])[0].replace("|", "/")


def _guidellm(script: str, base_url: str, rate: float, count: int, model: str, out: Path) -> list[str]:
    # guidellm 0.8's option layout (kind=...,key=value); its synthetic prompts need a tokenizer
    return [script, "run", "--backend", f"kind=openai_http,target={base_url},model={model}",
            "--profile", f"kind=poisson,rate={rate:g}", "--constraint", f"kind=max_requests,count={count}",
            "--data", "kind=synthetic_text,prompt_tokens=128,output_tokens=20",
            "--output", f"kind=json,path={out / 'guidellm.json'}", "--disable-console-interactive"]


def _read_guidellm(out: Path) -> dict[str, Any]:
    report = json.loads((out / "guidellm.json").read_text())
    (benchmark,) = report["benchmarks"]
    requests = benchmark["requests"]["successful"]
    ttfts = [r["time_to_first_token_ms"] for r in requests if r.get("time_to_first_token_ms") is not None]
    metrics = benchmark["metrics"]
    return {"ttft_ms": ttfts, "errors": ["errored"] * len(benchmark["requests"].get("errored", [])),
            "achieved_rps": metrics["requests_per_second"]["successful"]["mean"], "cpu_s": None}


def _aiperf(script: str, base_url: str, rate: float, count: int, model: str, out: Path) -> list[str]:
    # builtin tokenizer: no download from a model hub (the bench never reaches the internet)
    return [script, "profile", "--url", base_url, "--model", model, "--endpoint-type", "chat", "--streaming",
            "--request-rate", f"{rate:g}", "--arrival-pattern", "poisson", "--request-count", str(count),
            "--isl", "128", "--output-tokens-mean", "20", "--tokenizer", "builtin", "--use-server-token-count",
            "--artifact-dir", str(out / "aiperf"), "--ui-type", "none"]


def _read_aiperf(out: Path) -> dict[str, Any]:
    (records,) = list((out / "aiperf").rglob("profile_export.jsonl"))
    ttfts, errors = [], []
    for line in records.read_text().splitlines():
        record = json.loads(line)
        metrics = record.get("metrics") or {}
        if record.get("error"):
            errors.append(str(record["error"])[:80])
        elif "time_to_first_token" in metrics:
            ttfts.append(float(metrics["time_to_first_token"]["value"]))
    (summary,) = list((out / "aiperf").rglob("profile_export_aiperf.json"))
    achieved = json.loads(summary.read_text())["request_throughput"]["avg"]
    return {"ttft_ms": ttfts, "errors": errors, "achieved_rps": achieved, "cpu_s": None}


_COMMANDS = {"guidellm": _guidellm, "aiperf": _aiperf}
_READERS = {"guidellm": _read_guidellm, "aiperf": _read_aiperf}
