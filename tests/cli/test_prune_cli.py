"""`prober prune`: retention from the flags or from prober.toml's [retention], bad input in one
line, and a prune on a live store while a real `prober run` writes loses nothing of that run."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prober.store import Store
from tests.support.cli import assert_one_clear_line, prober
from tests.support.history import nightly_template_store

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import history_scale as bench

RUN = ("run", "--suite", "latency", "--target", "emu", "--param", "levels=[1,4]", "--param", "requests_per_level=40",
       "--param", "warmup=0", "--param", "max_tokens=16")


def _config(tmp_path: Path, retention: str = "") -> Path:
    config = tmp_path / "prober.toml"
    config.write_text(f'[store]\nurl = "sqlite:///{tmp_path}/p.db"\n[runner]\nprogress = false\n'
                      '[targets.emu]\nprotocol = "anthropic"\nmodel = "emulator-1"\nemulator = { }\n' + retention)
    return config


def _old_history(tmp_path: Path, nights: int = 20, targets: int = 3) -> None:
    """Nightly runs of 3 targets, the newest 40 days old."""
    nightly_template_store(f"sqlite:///{tmp_path / 'template.db'}")
    template = bench.load_template(f"sqlite:///{tmp_path / 'template.db'}")
    bench.write_history(f"sqlite:///{tmp_path}/p.db", nights, targets, template,
                        end=dt.datetime.now(dt.UTC) - dt.timedelta(days=40))


@pytest.mark.unit
def test_prune_without_flags_applies_the_configured_retention(tmp_path: Path) -> None:
    _old_history(tmp_path, nights=3, targets=2)
    config = _config(tmp_path, '[retention]\nsamples_older_than = "30d"\n')
    result = prober("prune", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "pruned samples older than 30d: 1440 samples deleted" in result.stdout, result.stdout
    store = Store.open(f"sqlite:///{tmp_path}/p.db")
    try:
        runs = store.list_runs()
        assert len(runs) == 3 and all(run["sample_count"] == 0 for run in runs)
        assert all(len(store.metrics(run["id"])) == 2 * 24 for run in runs)
    finally:
        store.close()


@pytest.mark.unit
@pytest.mark.parametrize(("args", "retention", "fragment"), [
    (("--samples-older-than", "soon"), "", "--samples-older-than 'soon': expected a duration"),
    (("--outputs-older-than", "-3d"), "", "--outputs-older-than '-3d': expected a duration"),
    ((), '[retention]\nsamples_older_than = "a year"\n', "retention.samples_older_than"),
])
def test_bad_ages_are_one_clear_line(tmp_path: Path, args: tuple[str, ...], retention: str, fragment: str) -> None:
    result = prober("prune", *args, "--config", str(_config(tmp_path, retention)), cwd=tmp_path)
    assert_one_clear_line(result, fragment)


def _running_run(url: str, deadline: float) -> dict:
    """The running run, once it has stored a sample."""
    while time.monotonic() < deadline:
        store = Store.open(url)
        try:
            running = [run for run in store.list_runs(limit=5) if run["status"] == "running"]
        finally:
            store.close()
        if running and running[0]["sample_count"] > 0:
            return running[0]
        time.sleep(0.2)
    raise AssertionError("the run stored no sample in time")


@pytest.mark.emulator
def test_prune_while_a_run_writes_loses_nothing_of_that_run(tmp_path: Path) -> None:
    config = _config(tmp_path)
    url = f"sqlite:///{tmp_path}/p.db"
    alone = prober(*RUN, "--config", str(config), cwd=tmp_path, timeout=300)
    assert alone.returncode in (0, 1), alone.stderr
    store = Store.open(url)
    try:
        reference = store.list_runs(limit=1)[0]
    finally:
        store.close()
    assert reference["status"] == "complete" and reference["sample_count"] > 0
    _old_history(tmp_path)

    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    log = tmp_path / "live.log"      # a file, not a pipe: nobody reads it while the loop prunes
    with log.open("w") as sink:
        live = subprocess.Popen([sys.executable, "-m", "prober", *RUN, "--config", str(config)], cwd=tmp_path,
                                env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        running = _running_run(url, time.monotonic() + 120)
        pruned, rounds = 0, 0
        while live.poll() is None:
            # The history's samples, and the output text of every run that started before the live one.
            store = Store.open(url)
            try:
                result = store.prune(samples_before=dt.datetime.now(dt.UTC) - dt.timedelta(days=30),
                                     outputs_before=running["started_at"] - dt.timedelta(seconds=1))
            finally:
                store.close()
            pruned += result.samples_deleted
            rounds += 1
    finally:
        if live.poll() is None:
            live.kill()
        live.wait(timeout=60)
    assert live.returncode in (0, 1), log.read_text()[-3000:]
    assert rounds >= 1 and pruned == 20 * 3 * 6 * 40      # the old history went while the run wrote

    store = Store.open(url)
    try:
        run = store.get_run(running["id"])
        assert run is not None and run["status"] == "complete"
        assert run["sample_count"] == reference["sample_count"], (run["sample_count"], reference["sample_count"])
        assert all(row["output_text"] for row in store.samples(run["id"]))
        assert not any(row["output_text"] for row in store.samples(reference["id"]))
        names = {row["name"] for row in store.metrics(reference["id"])}
        assert {row["name"] for row in store.metrics(run["id"])} == names
        assert all(r["sample_count"] == 0 for r in store.list_runs(limit=100, suite="nightly"))
    finally:
        store.close()
