"""Bad input and broken surroundings through the real CLI: one line, the documented exit code, no
traceback, and nothing stored lost (issue 11, items 3 and 4)."""

import contextlib
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys

import pytest

from prober.core.config import ProberConfig
from prober.run.runner import Runner
from prober.store import Store
from prober.store.store import _FINAL_WRITE_RESERVE
from prober.targets.openai import OpenAIStreamDecoder
from tests.support.cli import prober, wait_for_samples
from tests.support.emulated import emulator_process, ground_truth

pytestmark = pytest.mark.emulator

FAST = "first_token_delay_ms = 1\ndecode_tokens_per_s = 5000\noutput_tokens = 60\nslots = 16\n"
SLOW = "first_token_delay_ms = 5\ndecode_tokens_per_s = 100\noutput_tokens = 10\nslots = 4\n"


def _config(tmp_path, base_url, db_url=None, extra=""):
    path = tmp_path / "prober.toml"
    path.write_text(f'[store]\nurl = "{db_url or f"sqlite:///{tmp_path}/p.db"}"\n[runner]\nprogress = false\n{extra}\n'
                    f'[targets.emu]\nprotocol = "openai"\nbase_url = "{base_url}"\nmodel = "emulator-1"\n')
    return path


def _one_error_line(result, code):
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    return errors[0]


@contextlib.contextmanager
def _mounted_tmpfs(path, options):
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"this sandbox refuses mount -t tmpfs: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


# -- item 3: input is checked before anything is sent --------------------------------------------

def test_an_unknown_param_exits_2_naming_the_key_and_sends_nothing(tmp_path):
    with emulator_process(tmp_path, FAST) as base_url:
        config = _config(tmp_path, base_url)
        result = prober("run", "--suite", "latency", "--target", "emu", "--config", str(config),
                        "--param", "nosuch=1", cwd=tmp_path)
        truth = ground_truth(base_url)
    line = _one_error_line(result, 2)
    assert "command line: --param nosuch" in line
    assert "requests_per_level" in line and "levels" in line
    assert truth == {}                              # the emulator saw no request
    assert not (tmp_path / "p.db").exists()


def test_a_bad_value_aimed_at_one_probe_names_the_command_line(tmp_path):
    config = _config(tmp_path, "http://127.0.0.1:9")
    result = prober("run", "--suite", "nightly", "--target", "emu", "--config", str(config),
                    "--param", "latency.levels=[0]", cwd=tmp_path)
    line = _one_error_line(result, 2)
    assert line.startswith("error: command line: --param latency.levels: ")
    assert ".toml" not in line


@pytest.mark.parametrize("base_url,fragment", [
    ("ftp://example.com", "scheme must be http or https"),
    ("http://127.0.0.1:70000", "Port out of range"),
    ("http://[::1:8080", "Invalid IPv6 URL"),
    ("http://:8080", "no host"),
])
def test_an_unusable_base_url_exits_2_at_load(tmp_path, base_url, fragment):
    config = _config(tmp_path, base_url)
    result = prober("run", "--suite", "latency", "--target", "emu", "--config", str(config), cwd=tmp_path)
    line = _one_error_line(result, 2)
    assert "targets.emu.base_url" in line and fragment in line and str(config) in line


def test_report_for_an_unknown_target_exits_2(tmp_path):
    with emulator_process(tmp_path, FAST) as base_url:
        config = _config(tmp_path, base_url)
        ran = prober("run", "--suite", "latency", "--target", "emu", "--config", str(config), "--param", "levels=[1]",
                     "--param", "requests_per_level=3", "--param", "warmup=0", cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
    line = _one_error_line(prober("report", "--target", "NOSUCH", "--config", str(config), "--out",
                                  str(tmp_path / "r"), cwd=tmp_path), 2)
    assert "--target 'NOSUCH'" in line and "emu" in line
    assert prober("report", "--target", "emu", "--config", str(config), "--out", str(tmp_path / "r"),
                  cwd=tmp_path).returncode == 0


# -- item 4: no traceback reaches a user --------------------------------------------------------

def _store_with_one_run(tmp_path, base_url):
    config = _config(tmp_path, base_url)
    ran = prober("run", "--suite", "latency", "--target", "emu", "--config", str(config), "--param", "levels=[1]",
                 "--param", "requests_per_level=5", "--param", "warmup=0", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    return config


def test_a_corrupt_sqlite_file_is_one_line_not_a_traceback(tmp_path):
    with emulator_process(tmp_path, FAST) as base_url:
        config = _store_with_one_run(tmp_path, base_url)
        db = tmp_path / "p.db"
        with sqlite3.connect(db) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
            # the table and its indexes: `prober runs` counts samples from an index alone
            samples_pages = [page for (page,) in conn.execute(
                "SELECT rootpage FROM sqlite_master WHERE tbl_name = 'samples' AND rootpage > 0")]
        data = bytearray(db.read_bytes())
        assert data.startswith(b"SQLite format 3\x00")   # the header stays valid; one table's pages are garbage
        rng = random.Random(11)
        for samples_page in samples_pages:
            start = (samples_page - 1) * page_size
            data[start:start + page_size] = bytes(rng.randrange(256) for _ in range(page_size))
        db.write_bytes(bytes(data))
        for args in (["runs"], ["report", "--format", "md", "--out", str(tmp_path / "r")]):
            line = _one_error_line(prober(*args, "--config", str(config), cwd=tmp_path), 2)
            assert "database file is damaged" in line and "malformed" in line
        run = prober("run", "--suite", "latency", "--target", "emu", "--config", str(config), "--param", "levels=[1]",
                     "--param", "requests_per_level=3", "--param", "warmup=0", cwd=tmp_path)
    assert run.returncode == 3, run.stderr
    assert "Traceback" not in run.stderr and "INSERT INTO" not in run.stderr
    assert "samples could not be stored" in run.stderr and "malformed" in run.stderr


def test_a_read_only_out_directory_exits_2(tmp_path):
    with emulator_process(tmp_path, FAST) as base_url:
        config = _store_with_one_run(tmp_path, base_url)
    with _mounted_tmpfs(tmp_path / "ro", "ro,size=64k") as read_only:
        for args in (["report", "--format", "html"], ["export", "--format", "csv"],
                     ["export", "--format", "prometheus"]):
            line = _one_error_line(prober(*args, "--out", str(read_only / "out"), "--config", str(config),
                                          cwd=tmp_path), 2)
            assert str(read_only) in line and "Read-only file system" in line


# Room left on the small file system once the empty store is made: the run's reserve for its final
# write and about a hundred samples more, far fewer than the run sends.
_ROOM_FOR_A_FEW_SAMPLES = _FINAL_WRITE_RESERVE + 192 * 1024


def _fill_to_room(mount, room):
    """Shrink the tmpfs at `mount` to what it holds now plus `room` bytes (whole 4 KiB pages)."""
    fs = os.statvfs(mount)
    used = (fs.f_blocks - fs.f_bfree) * fs.f_frsize
    size_kib = -(-(used + room) // 4096) * 4
    subprocess.run(["mount", "-o", f"remount,size={size_kib}k", str(mount)], check=True)


def test_a_full_disk_marks_the_run_failed_and_keeps_what_was_stored(tmp_path):
    """The SQLite file lives on a small tmpfs that the empty store leaves a few hundred KiB of: it
    fills after a few dozen samples. The room is measured, not fixed, so that a store whose empty
    schema grows (a migration, an index) still starts its run and then fills."""
    with _mounted_tmpfs(tmp_path / "small", "size=8m") as small, emulator_process(tmp_path, FAST) as base_url:
        db_url = f"sqlite:///{small}/p.db"
        Store.open(db_url).close()      # the schema, as the run would make it
        _fill_to_room(small, _ROOM_FOR_A_FEW_SAMPLES)
        config = _config(tmp_path, base_url, db_url)
        result = prober("run", "--suite", "latency", "--target", "emu", "--config", str(config), "--param",
                        "levels=[8]", "--param", "requests_per_level=600", "--param", "warmup=0", cwd=tmp_path)
        assert result.returncode == 3, result.stderr
        assert "Traceback" not in result.stderr
        assert "samples could not be stored" in result.stderr and "disk is full" in result.stderr
        # Reading back needs a little room (SQLite's shared-memory file): the run may have left
        # none, and then opening the store here failed (2 runs in 12 under load).
        subprocess.run(["mount", "-o", "remount,size=4m", str(small)], check=True)
        store = Store.open(db_url)
        try:
            (run,) = store.list_runs()
            kept = store.samples(run["id"])
        finally:
            store.close()
    assert run["status"] == "failed"
    assert "disk is full" in run["notes"]["problems"][0]
    assert 0 < len(kept) < 600
    assert f"{len(kept)} samples stored" in result.stderr      # the count that reached the store


def test_emulate_on_a_port_in_use_exits_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _one_error_line(prober("emulate", "--port", str(port), cwd=tmp_path, timeout=60), 2)
    assert f"cannot listen on 127.0.0.1:{port}" in line and "in use" in line


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_whole_process_group_ends_the_run_interrupted_with_every_sample(tmp_path, sig):
    """As `timeout`, systemd and Ctrl-C do: the sample-writer child gets the signal too."""
    with emulator_process(tmp_path, SLOW) as base_url:
        config = _config(tmp_path, base_url)
        process = subprocess.Popen([sys.executable, "-m", "prober", "run", "--suite", "latency", "--target", "emu",
                                    "--config", str(config), "--param", "levels=[2]", "--param",
                                    "requests_per_level=500", "--param", "warmup=0"],
                                   cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True, env=dict(os.environ, COLUMNS="200"))
        db_url = f"sqlite:///{tmp_path}/p.db"
        run_id = wait_for_samples(db_url, 5)
        os.killpg(process.pid, sig)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 3, stderr
    assert "Traceback" not in stderr and "SampleStorageError" not in stderr
    with Store.open(db_url) as store:
        run = store.get_run(run_id)
        stored = len(store.samples(run_id))
    assert run["status"] == "interrupted" and run["finished_at"] is not None
    # every sample the run handed to its writer reached the store
    assert f"{stored} samples stored" in stderr and stored >= 5


def test_an_exception_in_prober_handling_a_response_is_an_internal_sample_not_retried(tmp_path, monkeypatch):
    def broken_feed(self, event, data, ns):
        raise RuntimeError("a bug in the decoder")

    monkeypatch.setattr(OpenAIStreamDecoder, "feed", broken_feed)   # a bug planted in prober, not the endpoint
    with emulator_process(tmp_path, FAST) as base_url:
        config = ProberConfig.model_validate({
            "store": {"url": f"sqlite:///{tmp_path}/p.db"}, "runner": {"progress": False, "max_retries": 3},
            "targets": {"emu": {"protocol": "openai", "base_url": base_url, "model": "emulator-1"}}})
        result = Runner(config).run("latency", ["emu"], {"levels": [1], "requests_per_level": 4, "warmup": 0})
    with Store.open(f"sqlite:///{tmp_path}/p.db") as store:
        rows = store.samples(result.run_id)
    assert len(rows) == 4 and all(r["attempt"] == 1 and r["final"] for r in rows)   # never retried
    assert {r["error_type"] for r in rows} == {"internal"}
    assert all("RuntimeError: a bug in the decoder" in r["error_message"] for r in rows)
    assert all("Traceback" in r["extra"]["traceback"] and "broken_feed" in r["extra"]["traceback"] for r in rows)
    assert result.exit_code == 3 and any("error rate 100%" in p for p in result.problems)
