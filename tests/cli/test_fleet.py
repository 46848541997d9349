"""A fleet on one store, end to end through the `prober` command against one emulator process:
several `prober run` processes with different sites writing one store at once lose no row;
`--shard I/N` processes of one `--batch` cover every target exactly once; `prober report --batch`
shows that night of the whole fleet. On SQLite and on a real PostgreSQL server (a new database
each test, so the processes also migrate it at the same moment)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from prober.store import Store
from tests.support.cli import prober
from tests.support.emulated import emulator_process
from tests.support.postgres import create_database

SCENARIO = "first_token_delay_ms = 5\nprefill_ms_per_token = 0\ndecode_tokens_per_s = 2000\nslots = 64\n"
# Small latency runs: two levels of 24 measured requests, about 50 samples and 29 metrics a target.
PARAMS = ["levels=[2, 8]", "requests_per_level=24", "warmup=1", "max_tokens=8", "input_tokens=16"]
TARGETS = [f"emu-{name}" for name in ("delta", "alpha", "echo", "bravo", "foxtrot", "charlie", "golf")]
STORED = re.compile(r"^(\d+) samples stored in \S+; run id (\w+); (\d+) metrics$", re.MULTILINE)


@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.emulator),
                        pytest.param("postgresql", marks=pytest.mark.infra)])
def fleet(request, tmp_path):
    """(config path, store url) for TARGETS, every one served by one emulator process."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'fleet.db'}"
    else:
        url = create_database(request.getfixturevalue("postgres_url"), f"fleet_{uuid.uuid4().hex[:12]}")
    with emulator_process(tmp_path, SCENARIO) as base_url:
        targets = "".join(f'[targets.{name}]\nprotocol = "openai"\nbase_url = "{base_url}"\nmodel = "emulator-1"\n\n'
                          for name in TARGETS)
        config = tmp_path / "prober.toml"
        config.write_text(f'[store]\nurl = "{url}"\n\n[runner]\nprogress = false\n\n{targets}')
        yield config, url


def _run_at_once(config: Path, runs: list[tuple[list[str], dict[str, str]]]) -> list[subprocess.CompletedProcess]:
    """`prober run --suite latency` once per (extra arguments, environment), all started together."""
    params = [arg for param in PARAMS for arg in ("--param", param)]
    started = [subprocess.Popen([sys.executable, "-m", "prober", "run", "--suite", "latency", "--config",
                                 str(config), *params, *args],
                                cwd=config.parent, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **env},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for args, env in runs]
    finished = []
    for process in started:
        stdout, stderr = process.communicate(timeout=600)
        finished.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    return finished


def _stored(result: subprocess.CompletedProcess) -> tuple[str, int, int]:
    """(run id, samples, metrics) as the run reported them."""
    assert result.returncode == 0, result.stdout + result.stderr
    (samples, run_id, metrics), = STORED.findall(result.stderr)
    return run_id, int(samples), int(metrics)


def test_sites_write_one_store_at_once_and_lose_no_row(fleet):
    """Four processes on PostgreSQL, two on one SQLite file, each from its own site; each run's
    samples and metrics in the store are those it reported."""
    config, url = fleet
    sites = [f"site-{index}" for index in range(4 if url.startswith("postgresql") else 2)]
    # three targets each: enough rows to interleave, little enough for two shared cores
    chosen = [arg for name in TARGETS[:3] for arg in ("--target", name)]
    reported = [_stored(result) for result in _run_at_once(config, [(chosen, {"PROBER_SITE": site})
                                                                    for site in sites])]
    with Store.open(url) as store:
        for site, (run_id, samples, metrics) in zip(sites, reported):
            run = store.get_run(run_id)
            assert run is not None and run["status"] == "complete" and run["site"] == site
            assert samples > 100 and run["sample_count"] == samples == len(store.samples(run_id))
            assert metrics > 60 and len(store.metrics(run_id)) == metrics
        assert sorted(run["site"] for run in store.list_runs(limit=50)) == sites


def test_shards_of_one_batch_cover_every_target_once_and_report_batch_shows_the_night(fleet, tmp_path):
    config, url = fleet
    count, batch = 3, "2026-12-01T02-00"
    results = _run_at_once(config, [(["--shard", f"{index}/{count}", "--batch", batch], {"PROBER_SITE": "fra"})
                                    for index in range(count)])
    run_ids = [_stored(result)[0] for result in results]
    # a run of another night, not in the batch
    other = _stored(prober("run", "--suite", "latency", "--config", str(config), "--target", TARGETS[0],
                           *[arg for param in PARAMS for arg in ("--param", param)], cwd=tmp_path,
                           env={"PROBER_BATCH": "2026-11-30T02-00", "PROBER_SITE": "fra"}))[0]
    with Store.open(url) as store:
        runs = store.list_runs(limit=10, batch=batch)
        assert store.get_run(other)["batch"] == "2026-11-30T02-00"
    assert sorted(run["id"] for run in runs) == sorted(run_ids)
    covered = [name for run in runs for name in run["targets"]]
    assert sorted(covered) == sorted(TARGETS)                          # every target, exactly once
    assert all(state["status"] == "complete" for run in runs for state in run["target_status"].values())
    for index, run_id in enumerate(run_ids):                           # shard I: sorted names, dealt
        assert next(run for run in runs if run["id"] == run_id)["targets"] == sorted(TARGETS)[index::count]

    shown = prober("report", "--batch", batch, "--format", "json", "--out", str(tmp_path / "night"),
                   "--config", str(config), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    report = json.loads(Path(shown.stdout.strip()).read_text())
    assert report["batch"] == batch
    assert sorted((s["target"], s["site"], s["latest_run"]["id"]) for s in report["sections"]) == \
        sorted((name, "fra", run["id"]) for run in runs for name in run["targets"])
    assert other not in {run["id"] for s in report["sections"] for run in s["runs"]}
    site = prober("report", "--batch", batch, "--out", str(tmp_path / "site"), "--config", str(config),
                  cwd=tmp_path)
    assert site.returncode == 0, site.stderr
    index = Path(site.stdout.strip()).read_text()
    assert f"batch {batch}" in index and all(f"<h2>{name}</h2>" in index for name in TARGETS)
    assert sorted(p.name for p in (tmp_path / "site" / "runs").iterdir()) == sorted(f"{r}.html" for r in run_ids)
