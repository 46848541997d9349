"""Peer load generators (guidellm, aiperf) at an open-loop rate, for bench/open_loop.py.

Each peer runs as its own console script from a virtual environment of its own (never prober's
lock), against the same fixed-delay server, at the same Poisson rate and request count. What is
read back, per request, from the peer's own export: the TTFT it reported (overhead = TTFT - 100 ms),
when it actually started the request (the achieved rate is computed from those times, as for
prober and the reference) and how late that was against the peer's own schedule (its send lag). A
peer that is not installed, or that fails, gives a row saying so instead of figures.

Both build their synthetic prompts with a Hugging Face tokenizer, which they would download; the
bench gives them a local one instead (`build_tokenizer`): a small byte-level BPE trained on the
bench's own prompt and answer text, saved as a transformers-loadable directory
(tokenizer.json + tokenizer_config.json) in a temporary directory, built by the peer's own
interpreter (its venv has `tokenizers` and `transformers`; prober's does not need them). Byte-level,
so every prompt a peer generates tokenizes, whatever its words. The token counts it gives are not a
real model's, which does not matter here: the server answers every request the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

PEER_TIMEOUT_S = 300.0
TOKENIZER_TIMEOUT_S = 120.0
# The bench's own text: the reference client's prompt filler and the server's answer words.
TOKENIZER_TEXT = [" ".join(["lorem"] * 32),
                  "Once upon a time a small robot measured the latency of every stream it could find "
                  "and wrote each number down"]
_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

_BUILD_TOKENIZER = """
import json, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
out, lines = sys.argv[1], json.loads(sys.stdin.read())
tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"], show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tokenizer.train_from_iterator(lines, trainer)
PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                        unk_token="<|endoftext|>", model_max_length=131072).save_pretrained(out)
"""


def available(script: str | None) -> bool:
    return bool(script) and (Path(script).exists() or shutil.which(script) is not None)  # type: ignore[arg-type]


def peer_python(script: str) -> str:
    """The interpreter of the virtual environment the peer's console script belongs to."""
    resolved = Path(shutil.which(script) or script)
    return str(resolved.parent / "python")


def build_tokenizer(script: str, directory: Path) -> str | None:
    """Write the local tokenizer into `directory` with the peer's interpreter; None when it worked,
    else why not (one line)."""
    try:
        done = subprocess.run([peer_python(script), "-c", _BUILD_TOKENIZER, str(directory)],
                              input=json.dumps(TOKENIZER_TEXT), capture_output=True, text=True,
                              timeout=TOKENIZER_TIMEOUT_S, env={**os.environ, **_OFFLINE})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no local tokenizer: {type(exc).__name__}: {exc}"
    if done.returncode != 0 or not (directory / "tokenizer.json").exists():
        lines = (done.stderr or done.stdout).strip().splitlines()
        return f"no local tokenizer: {(lines[-1] if lines else 'no output')[:160]}"
    return None


def run_peer(name: str, script: str | None, base_url: str, rate: float, count: int, model: str,
             tokenizer: Path | None) -> dict[str, Any]:
    if not script or not available(script):
        return {"unavailable": "not installed"}
    if tokenizer is None:
        return {"unavailable": "failed: no local tokenizer (see above)"}
    with tempfile.TemporaryDirectory(prefix=f"prober-bench-{name}-") as out:
        command = _COMMANDS[name](script, base_url, rate, count, model, Path(out), tokenizer)
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=PEER_TIMEOUT_S, cwd=out,
                                  env={**os.environ, **_ENVIRONMENT[name]})
        except subprocess.TimeoutExpired:
            return {"unavailable": f"failed: no result within {PEER_TIMEOUT_S:g}s"}
        if done.returncode != 0:
            return {"unavailable": f"failed (exit {done.returncode}): {_first_error(done, Path(out))[:200]}"}
        try:
            return _READERS[name](Path(out))
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            return {"unavailable": f"failed: unreadable result ({type(exc).__name__}: {exc})"}


def _first_error(done: subprocess.CompletedProcess[str], out: Path) -> str:
    """The first line that names an error, in the peer's output or its log files (aiperf says only
    where its log is); else its last line."""
    texts = [done.stderr, done.stdout] + [log.read_text(errors="replace") for log in sorted(out.rglob("*.log"))]
    lines = [line.strip() for text in texts for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines[-1:] or ["no output"])[0].replace("|", "/")


def _guidellm(script: str, base_url: str, rate: float, count: int, model: str, out: Path,
              tokenizer: Path) -> list[str]:
    # guidellm 0.8's option layout (kind=...,key=value)
    return [script, "run", "--backend", f"kind=openai_http,target={base_url},model={model}",
            "--profile", f"kind=poisson,rate={rate:g}", "--constraint", f"kind=max_requests,count={count}",
            "--data", "kind=synthetic_text,prompt_tokens=128,output_tokens=20",
            "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
            "--output", f"kind=json,path={out / 'guidellm.json'}", "--disable-console-interactive"]


def _read_guidellm(out: Path) -> dict[str, Any]:
    """guidellm 0.8's JSON report: per request `time_to_first_token_ms`, and in `info.timings`
    (epoch seconds) `targeted_start` (its schedule) and `request_start` (when it sent)."""
    report = json.loads((out / "guidellm.json").read_text())
    (benchmark,) = report["benchmarks"]
    requests = benchmark["requests"]
    done = requests["successful"]
    timings = [r["info"]["timings"] for r in done]
    return {"ttft_ms": [r["time_to_first_token_ms"] for r in done if r.get("time_to_first_token_ms") is not None],
            "errors": [str((r.get("info") or {}).get("error") or "errored")[:80] for r in requests["errored"]]
                      + ["incomplete"] * len(requests.get("incomplete") or []),
            "sent_ns": sorted(round(t["request_start"] * 1e9) for t in timings if t.get("request_start")),
            # A few requests per run carry a targeted_start that is not an epoch time (their lag
            # came out as about 1.8e12 ms, the epoch itself): only epoch times (after 2001) count.
            "send_lag_ms": [1e3 * (t["request_start"] - t["targeted_start"]) for t in timings
                            if t.get("request_start") and (t.get("targeted_start") or 0) > 1e9],
            "cpu_s": None}


def _aiperf(script: str, base_url: str, rate: float, count: int, model: str, out: Path,
            tokenizer: Path) -> list[str]:
    return [script, "profile", "--url", base_url, "--model", model, "--endpoint-type", "chat", "--streaming",
            "--request-rate", f"{rate:g}", "--arrival-pattern", "poisson", "--request-count", str(count),
            "--isl", "128", "--output-tokens-mean", "20", "--tokenizer", str(tokenizer), "--use-server-token-count",
            "--artifact-dir", str(out / "aiperf"), "--ui-type", "none"]


def _read_aiperf(out: Path) -> dict[str, Any]:
    """aiperf 0.13's profile_export.jsonl: one record per request, `metrics.time_to_first_token`
    (ms) and in `metadata` `credit_issued_ns` (its schedule let the request go) and
    `request_start_ns` (when it sent)."""
    (records,) = list((out / "aiperf").rglob("profile_export.jsonl"))
    ttfts, errors, sent, lags = [], [], [], []
    for line in records.read_text().splitlines():
        record = json.loads(line)
        metadata, metrics = record.get("metadata") or {}, record.get("metrics") or {}
        if record.get("error"):
            errors.append(str(record["error"])[:80])
            continue
        if "time_to_first_token" in metrics:
            ttfts.append(float(metrics["time_to_first_token"]["value"]))
        if metadata.get("request_start_ns"):
            sent.append(int(metadata["request_start_ns"]))
            if metadata.get("credit_issued_ns"):
                lags.append((metadata["request_start_ns"] - metadata["credit_issued_ns"]) / 1e6)
    return {"ttft_ms": ttfts, "errors": errors, "sent_ns": sorted(sent), "send_lag_ms": lags, "cpu_s": None}


_COMMANDS = {"guidellm": _guidellm, "aiperf": _aiperf}
# aiperf 0.13 in Hugging Face offline mode looks a tokenizer up only in the hub's cache, never at a
# local path ("Repo id must be in the form ..."); online, it loads the local directory without a
# download. guidellm loads it either way: offline spares it any attempt to reach the hub.
_ENVIRONMENT: dict[str, dict[str, str]] = {"guidellm": _OFFLINE, "aiperf": {}}
_READERS = {"guidellm": _read_guidellm, "aiperf": _read_aiperf}
