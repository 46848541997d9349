"""Run the real `prober` console script in a subprocess, as a user or cron would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def prober(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600,
           **kwargs) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}   # env wins
    return subprocess.run([sys.executable, "-m", "prober.cli", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, **kwargs)


def assert_one_clear_line(result: subprocess.CompletedProcess, *fragments: str) -> None:
    """Bad input's contract: exit 2, one line on stderr holding each fragment, no traceback."""
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def run_suite_on_local(tmp_path: Path, port: int, suite: str, *params: str, protocol: str = "openai",
                       timeout: float = 900) -> tuple[list[dict], list[dict]]:
    """`prober run --suite SUITE --target local --param ...` through the CLI against a llama-server
    on `port`, storing into tmp_path; asserts the run completed (exit 0) with no failed request and
    returns its stored samples and metrics."""
    from store import Store

    config = tmp_path / "prober.toml"
    config.write_text(f'[store]\nurl = "sqlite:///{tmp_path}/p.db"\n\n[runner]\nprogress = false\n\n'
                      f'[targets.local]\nprotocol = "{protocol}"\nbase_url = "http://127.0.0.1:{port}"\n'
                      f'model = "SmolLM2-135M-Instruct"\n')
    args = [arg for param in params for arg in ("--param", param)]
    run = prober("run", "--suite", suite, "--target", "local", "--config", str(config), *args, cwd=tmp_path,
                 timeout=timeout)
    assert run.returncode == 0, run.stdout + run.stderr
    store = Store.open(f"sqlite:///{tmp_path}/p.db")
    try:
        (summary,) = store.list_runs(limit=1)
        assert summary["status"] == "complete"
        rows, metrics = store.samples(summary["id"]), store.metrics(summary["id"])
    finally:
        store.close()
    assert [r for r in rows if r["error_type"]] == []
    return rows, metrics


def wait_for_samples(db_url: str, at_least: int, timeout: float = 60.0) -> str:
    """The id of the newest run once it has `at_least` stored samples (a run going on in another process)."""
    import time

    from store import Store

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with Store.open(db_url) as store:
            runs = store.list_runs(limit=1)
        if runs and runs[0].get("sample_count", 0) >= at_least:
            return runs[0]["id"]
        time.sleep(0.2)
    raise AssertionError("the run stored no samples in time")
