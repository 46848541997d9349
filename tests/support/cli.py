"""Run the real `prober` command in a process of its own, as a user or cron would."""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

# The environment before any test changed it: the zygote's own (a unit test's socket guard, say,
# reaches each command through its `env`, not the zygote).
_BASE_ENV = dict(os.environ)
_REPO = Path(__file__).resolve().parents[2]
_zygote: subprocess.Popen | None = None
_zygote_lock = threading.Lock()


def _zygote_process() -> subprocess.Popen:
    """tests/support/prober_zygote.py, started on first use and kept for this test process."""
    global _zygote
    if _zygote is None or _zygote.poll() is not None:
        _zygote = subprocess.Popen(
            [sys.executable, "-c", "from tests.support.prober_zygote import serve; serve()"], cwd=_REPO,
            env=_BASE_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        atexit.register(_stop, _zygote)
    return _zygote


def _stop(zygote: subprocess.Popen) -> None:
    """End of input ends the zygote; waiting for it counts its CPU (and its children's) in ours."""
    assert zygote.stdin is not None
    zygote.stdin.close()
    try:
        zygote.wait(10)
    except subprocess.TimeoutExpired:
        zygote.kill()
        zygote.wait()


def _ask(request: dict) -> dict:
    with _zygote_lock:
        zygote = _zygote_process()
        assert zygote.stdin is not None and zygote.stdout is not None
        zygote.stdin.write(json.dumps(request) + "\n")
        zygote.stdin.flush()
        return json.loads(zygote.stdout.readline())


def _environment(env: dict[str, str] | None) -> dict[str, str]:
    return {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}   # env wins


def prober(*args: str, cwd: Path, env: dict[str, str] | None = None,
           timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m prober ARGS` in `cwd`, its output captured as text: a fresh process forked
    from a zygote that has the third-party imports done (tests/support/prober_zygote.py), about
    0.55 s of CPU less per command than a new interpreter."""
    command = [sys.executable, "-m", "prober", *args]
    reply = _ask({"args": list(args), "cwd": str(cwd), "env": _environment(env), "timeout": timeout})
    if reply["timeout"]:
        raise subprocess.TimeoutExpired(command, timeout, reply["stdout"], reply["stderr"])
    return subprocess.CompletedProcess(command, reply["returncode"], reply["stdout"], reply["stderr"])


class BackgroundProber:
    """`prober ARGS` left running (a server: `prober emulate`), forked by the zygote as `prober`
    above is: as much of Popen as tests/support/processes.py uses. Its stdout is discarded and
    its stderr kept in a file, read through `stderr` as a pipe would be."""

    def __init__(self, *args: str, cwd: Path, stderr_path: Path) -> None:
        stderr_path.write_bytes(b"")
        self.args = [sys.executable, "-m", "prober", *args]
        self.stdout = None
        self.stderr = stderr_path.open("rb")
        self.returncode: int | None = None
        self.pid = _ask({"args": list(args), "cwd": str(cwd), "env": _environment(None), "background": True,
                         "stderr_path": str(stderr_path)})["pid"]

    def poll(self) -> int | None:
        return self.wait(0, raising=False)

    def wait(self, timeout: float | None = None, raising: bool = True) -> int | None:
        if self.returncode is None:
            self.returncode = _ask({"wait": self.pid, "timeout": timeout})["returncode"]
            if self.returncode is None and raising:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def terminate(self) -> None:
        if self.returncode is None:   # not yet reaped, so the pid is still this process's
            os.kill(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)


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
    from prober.store import Store

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

    from prober.store import Store

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with Store.open(db_url) as store:
            runs = store.list_runs(limit=1)
        if runs and runs[0].get("sample_count", 0) >= at_least:
            return runs[0]["id"]
        time.sleep(0.2)
    raise AssertionError("the run stored no samples in time")
