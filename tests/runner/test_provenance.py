"""Provenance and per-target isolation, end to end through the CLI against the in-process emulator
and a closed port: what each run measured is stored and shown, a failing target fails alone, and a
drift baseline only takes runs that measured the same thing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prober.alerting.baseline import select_baselines
from prober.store import Store
from tests.support.cli import prober
from tests.support.llama import free_port

pytestmark = pytest.mark.emulator

# 6 requests: the fewest whose p50 has a bounded interval, so an SLO can judge it.
SMALL = ("levels=[1,2]", "requests_per_level=6", "warmup=0", "max_tokens=8")


def _config(tmp_path, *, closed_port: int | None = None, extra: str = "") -> str:
    text = (f'[store]\nurl = "sqlite:///{tmp_path}/p.db"\n[runner]\nprogress = false\n'
            "[drift]\nmin_baseline_runs = 1\n"
            '[targets.emu]\nprotocol = "anthropic"\nmodel = "emulator-1"\n[targets.emu.emulator]\n')
    if closed_port is not None:
        text += (f'[targets.closed]\nprotocol = "openai"\nbase_url = "http://127.0.0.1:{closed_port}"\n'
                 'model = "m"\n[targets.closed.timeouts]\nconnect = 2\n')
    path = tmp_path / "prober.toml"
    path.write_text(text + extra)
    return str(path)


def _run(tmp_path, config, *params, suite="latency"):
    args = ["run", "--suite", suite, "--config", config]
    for p in params:
        args += ["--param", p]
    done = prober(*args, cwd=tmp_path)
    match = re.search(r"run id ([0-9a-f]{12})", done.stderr)
    assert match, done.stderr
    return done, match.group(1)


SLO_RULES = """
[[slo]]
name = "ttft_ok"
metric = "ttft_p50_ms"
threshold = 60000
[[slo]]
name = "ttft_at_17"
metric = "ttft_p50_ms"
labels = { concurrency = 17 }
threshold = 60000
"""


def test_a_closed_port_fails_alone_and_the_emulator_target_is_judged(tmp_path):
    config = _config(tmp_path, closed_port=free_port(), extra=SLO_RULES)
    # Three runs first: the night-level drift tests need three comparable baseline runs.
    earlier = [_run(tmp_path, config, *SMALL) for _ in range(3)]
    second, run_id = _run(tmp_path, config, *SMALL)
    for done in (*(done for done, _ in earlier), second):
        assert done.returncode == 3, done.stderr
        assert "Traceback" not in done.stderr
    # The emulator target gets its SLO line; the closed one says why it did not complete.
    assert "emu: SLOs: 1 held, 0 broken, 1 no data" in second.stdout
    assert re.search(r"closed: failed \(cannot connect to 127\.0\.0\.1:\d+.*\); SLOs not checked", second.stdout)
    assert "warning: slo rule 'ttft_at_17' matched no metric of target emu" in second.stderr

    with Store.open(f"sqlite:///{tmp_path}/p.db") as store:
        run = store.get_run(run_id)
        assert run["status"] == "failed"
        assert run["target_status"]["emu"]["status"] == "complete"
        assert run["target_status"]["closed"]["status"] == "failed"
        assert "cannot connect" in run["target_status"]["closed"]["reason"]
        metrics = store.metrics(run_id)
        assert {m["target"] for m in metrics} == {"emu"}
        assert all(m["entry"] == "latency.latency" for m in metrics)
        assert all(s["entry"] == "latency.latency" for s in store.samples(run_id))
        # SLO and drift verdicts for the emulator target, from this run; nothing for the closed one.
        judged = [a for a in store.alerts() if a["last_run_id"] == run_id]
        assert {a["target"] for a in judged} == {"emu"}
        assert {a["kind"] for a in judged} == {"slo", "drift"}
        # the baseline's runs, newest first (read without their sample counts: a baseline reads no sample)
        assert [r["id"] for r in select_baselines(store, run, "emu", 7)["latency.latency"].runs] == [
            i for _, i in reversed(earlier)]
        entries = store.run_entries(run_id)
        assert {(e["target"], e["probe"], e["probe_version"]) for e in entries} == {
            ("emu", "latency", 1), ("closed", "latency", 1)}
        assert all(e["params"]["requests_per_level"] == 6 and e["params"]["levels"] == [1, 2] for e in entries)

    listing = prober("runs", "--config", config, cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert "emu: complete; closed: failed (cannot connect" in " ".join(listing.stdout.split())
    shown = prober("show", run_id, "--config", config, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "target emu: complete (target config " in shown.stdout
    assert re.search(r"target closed: failed: cannot connect to 127\.0\.0\.1:\d+", shown.stdout)
    assert "latency.latency: latency probe v1, params " in shown.stdout and "requests_per_level=6" in shown.stdout
    assert "slo ttft_ok on emu: held: " in shown.stdout
    assert "slo ttft_at_17 on emu: no data: matched no metric" in shown.stdout
    assert "emu: SLOs: 1 held, 0 broken, 1 no data" in shown.stdout
    report = prober("report", "--format", "md", "--out", str(tmp_path / "report"), "--config", config, cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    markdown = Path(report.stdout.strip().splitlines()[-1]).read_text(encoding="utf-8")
    assert "- target emu: complete (target config " in markdown
    # the report's parameters: a table of those the run set apart from the probe's defaults
    assert "| latency.latency (latency v1) | requests\\_per\\_level | 6 | 400 |" in markdown, markdown


def test_runs_with_different_params_never_share_a_baseline(tmp_path):
    config = _config(tmp_path)
    _, four_a = _run(tmp_path, config, *SMALL)
    _, four_b = _run(tmp_path, config, *SMALL)
    changed, six = _run(tmp_path, config, "levels=[1,2]", "requests_per_level=7", "warmup=0", "max_tokens=8")
    assert changed.returncode == 0, changed.stderr
    assert "baseline reset: emu latency.latency: requests_per_level 6 -> 7" in changed.stderr
    # Another level list with the same per-level parameters: comparable at the levels both have.
    wider, wide = _run(tmp_path, config, "levels=[1,4]", "requests_per_level=7", "warmup=0", "max_tokens=8")
    assert "baseline reset" not in wider.stderr

    with Store.open(f"sqlite:///{tmp_path}/p.db") as store:
        def window(run_id):
            return [r["id"] for r in select_baselines(store, store.get_run(run_id), "emu", 7)["latency.latency"].runs]

        assert window(four_b) == [four_a]
        assert window(six) == []
        assert window(wide) == [six]
        drift = [a for a in store.alerts() if a["kind"] == "drift"]
        assert not [a for a in drift if a["last_run_id"] == six]   # no baseline, no test
        # A latency family pools its levels: [1, 4] pools other cells than [1, 2], so no drift
        # test for the wider run, although its runs are comparable at level 1.
        assert not [a for a in drift if a["last_run_id"] == wide]


def test_two_entries_of_one_probe_are_kept_apart(tmp_path):
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "twice.toml").write_text(
        'description = "latency twice"\n'
        '[[probes]]\nprobe = "latency"\n[probes.params]\nlevels = [1]\nrequests_per_level = 3\nwarmup = 0\n'
        'max_tokens = 8\n'
        '[[probes]]\nprobe = "latency"\n[probes.params]\nlevels = [1]\nrequests_per_level = 5\nwarmup = 0\n'
        'max_tokens = 8\n')
    config = _config(tmp_path, extra='suite_paths = ["suites"]\n')
    # suite_paths must sit before the first table
    text = (tmp_path / "prober.toml").read_text().replace('suite_paths = ["suites"]\n', "")
    (tmp_path / "prober.toml").write_text('suite_paths = ["suites"]\n' + text)
    done, run_id = _run(tmp_path, config, suite="twice")
    assert done.returncode == 0, done.stderr
    with Store.open(f"sqlite:///{tmp_path}/p.db") as store:
        by_entry = {(m["entry"], m["name"]): m for m in store.metrics(run_id) if m["name"] == "ttft_p50_ms"}
        assert by_entry[("twice.latency", "ttft_p50_ms")]["n"] == 3
        assert by_entry[("twice.latency#2", "ttft_p50_ms")]["n"] == 5
        assert [e["entry"] for e in store.run_entries(run_id)] == ["twice.latency", "twice.latency#2"]


def test_a_version_2_database_keeps_its_runs_and_they_reset_the_baseline(tmp_path):
    from prober.alerting.baseline import select_baselines
    from prober.store import migrate
    from prober.store.engine import open_engine
    from prober.store.rows import run_row
    from prober.store.schema import runs
    from tests.store.test_store_roundtrip import make_run

    url = f"sqlite:///{tmp_path}/old.db"
    engine = open_engine(url)
    try:
        migrate(engine, upto=2)
        with engine.begin() as conn:   # a run from before provenance was stored
            row = run_row(make_run("old", status="complete"))
            for later in ("lease_expires_at", "site", "batch"):   # columns from later migrations
                del row[later]
            conn.execute(runs.insert().values(row))
    finally:
        engine.dispose()

    entry = {"entry": "latency.latency", "probe": "latency", "probe_version": 1,
             "params": {"levels": [1], "requests_per_level": 4}}
    with Store.open(url) as store:
        old = store.get_run("old")
        assert old["target_status"] == {} and old["status"] == "complete"
        for run_id, version in (("v1", 1), ("v2", 2)):
            store.create_run(make_run(run_id))
            store.start_target(run_id, "emu", "hash", [{**entry, "probe_version": version}])
            store.finish_target(run_id, "emu", "complete")
        v1 = select_baselines(store, store.get_run("v1"), "emu", 7)["latency.latency"]
        assert v1.runs == []
        assert v1.reset == "baseline reset: emu latency.latency: earlier runs recorded no parameters or probe version"
        v2 = select_baselines(store, store.get_run("v2"), "emu", 7)["latency.latency"]
        assert v2.runs == []
        assert v2.reset == "baseline reset: emu latency.latency: latency probe version 1 -> 2"
