"""Stale runs wherever they ran (issue 11, item 5): a run renews a lease in the store; once it has
expired, the next command to open the store marks the run interrupted, whatever its hostname.

Each prober process runs in its own UTS namespace (`unshare -u`) with its own hostname, as pods
and containers do, on one SQLite file and on one PostgreSQL database."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from prober.store import Store
from tests.support.cli import wait_for_samples
from tests.support.emulated import emulator_process
from tests.support.postgres import create_database

SLOW = "first_token_delay_ms = 5\ndecode_tokens_per_s = 100\noutput_tokens = 10\nslots = 4\n"
LEASE_SECONDS = 8   # long enough that starting the "early" command below fits well inside it on a busy machine

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0,
                                reason="needs root and unshare(1) for per-process hostnames")


def _as_host(hostname, *args):
    """argv running `prober ARGS` with its own hostname."""
    return ["unshare", "-u", "sh", "-c", 'hostname "$0" && exec "$@"', hostname, sys.executable, "-m", "prober",
            *args]


def _prober_as(hostname, tmp_path, *args):
    return subprocess.run(_as_host(hostname, *args), cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, COLUMNS="200"))


def _status(db_url, run_id):
    with Store.open(db_url) as store:
        run = store.get_run(run_id)
    return run["status"], run["host"], run["sample_count"], run["notes"]


@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.emulator),
                        pytest.param("postgresql", marks=pytest.mark.infra)])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/shared.db"
    return create_database(request.getfixturevalue("postgres_url"), f"lease_{time.monotonic_ns()}")


def test_a_killed_run_is_marked_interrupted_from_another_host_once_its_lease_expires(tmp_path, db_url):
    with emulator_process(tmp_path, SLOW) as base_url:
        config = tmp_path / "prober.toml"
        config.write_text(f'[store]\nurl = "{db_url}"\n[runner]\nprogress = false\nlease_seconds = {LEASE_SECONDS}\n'
                          f'[targets.emu]\nprotocol = "openai"\nbase_url = "{base_url}"\nmodel = "emulator-1"\n')
        process = subprocess.Popen(_as_host("pod-a", "run", "--suite", "latency", "--target", "emu", "--config",
                                            str(config), "--param", "levels=[1]", "--param", "requests_per_level=5000",
                                            "--param", "warmup=0"),
                                   cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        try:
            run_id = wait_for_samples(db_url, 3)
            # Alive for 1.5 lease lengths: its renewals keep another host from judging it stale.
            time.sleep(1.5 * LEASE_SECONDS)
            seen = _prober_as("pod-b", tmp_path, "runs", "--config", str(config))
            assert seen.returncode == 0, seen.stderr
            status, host, _, _ = _status(db_url, run_id)
            assert (status, host) == ("running", "pod-a")
        finally:
            os.killpg(process.pid, signal.SIGKILL)   # the pod is gone: no handler runs
            process.wait(10)
    _, _, kept, _ = _status(db_url, run_id)
    assert kept >= 3
    # Another host cannot see pod-a's processes; until the lease runs out the run still counts as live.
    early = _prober_as("pod-b", tmp_path, "runs", "--config", str(config))
    assert early.returncode == 0 and _status(db_url, run_id)[0] == "running"
    time.sleep(LEASE_SECONDS + 0.5)
    later = _prober_as("pod-b", tmp_path, "export", "--format", "csv", "--out", str(tmp_path / "csv"),
                      "--config", str(config))
    assert later.returncode == 0, later.stderr
    assert f"run {run_id} was left running by a process that is gone: marked interrupted" in later.stderr
    status, _, after, notes = _status(db_url, run_id)
    assert status == "interrupted" and after == kept
    assert notes["interrupted_because"].startswith("lease expired at ")
