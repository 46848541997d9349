"""`--json` of `prober run`, `runs`, `show` and `history` (issue 32, item 5): each document is
parsed, its schema, keys and types checked, and its values compared with the store; `history`
takes `--label` and still the old `--labels`."""

from __future__ import annotations

import json
import textwrap

import pytest

from prober.store import Store
from tests.support.cli import prober

pytestmark = pytest.mark.emulator

QUICK = ["--param", "levels=[1]", "--param", "requests_per_level=12", "--param", "warmup=0"]


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory):
    """One latency run of two emulator targets with `prober run --json`: a rule that holds and one
    that breaks with `for = 2` (pending after one run)."""
    tmp = tmp_path_factory.mktemp("json")
    (tmp / "prober.toml").write_text(textwrap.dedent(f"""
        [store]
        url = "sqlite:///{tmp}/prober.db"
        [runner]
        progress = false
        [targets.a]
        protocol = "openai"
        model = "emulator-1"
        emulator = {{}}
        [targets.b]
        protocol = "anthropic"
        model = "emulator-1"
        emulator = {{}}
        [[slo]]
        name = "loose_ttft"
        metric = "ttft_p50_ms"
        comparator = "<="
        threshold = 100000
        [[slo]]
        name = "impossible_ttft"
        metric = "ttft_p50_ms"
        comparator = "<="
        threshold = 0
        for = 2
    """))
    done = prober("run", "--suite", "latency", "--json", *QUICK, cwd=tmp)
    return tmp, done


def test_run_json_is_the_final_verdicts_and_nothing_else_on_stdout(judged_run):
    tmp, done = judged_run
    assert done.returncode == 0, done.stderr             # broken but pending: no alert fired
    document = json.loads(done.stdout)                   # the whole of stdout is one document
    assert document["schema"] == "prober.run/1"
    assert set(document) == {"schema", "run_id", "suite", "status", "exit_code", "targets"}
    assert (document["suite"], document["status"], document["exit_code"]) == ("latency", "complete", 0)
    with Store.open(f"sqlite:///{tmp}/prober.db", create=False) as store:
        run = store.get_run(document["run_id"])
        pending = store.alerts(state="pending")
    assert run is not None and run["status"] == "complete"
    assert [t["target"] for t in document["targets"]] == ["a", "b"]
    for verdict in document["targets"]:
        assert verdict["status"] == "complete" and verdict["reason"] is None
        assert verdict["slo"] == {"held": 1, "broken": 1, "no data": 0}
        assert verdict["firing"] == []
        [waiting] = verdict["pending"]
        assert (waiting["name"], waiting["breaks"], waiting["for"]) == ("impossible_ttft", 1, 2)
    assert sorted(row["target"] for row in pending) == ["a", "b"]
    assert "SLOs:" not in done.stdout and "ttft_p50_ms" in done.stderr   # the table went to stderr


def test_run_without_json_names_the_pending_state_on_its_last_lines(judged_run):
    tmp, _ = judged_run
    again = prober("run", "--suite", "latency", "--target", "a", *QUICK, cwd=tmp)
    # The second breaking run in a row fires; b was not run, so its alert stays pending.
    assert again.returncode == 1, again.stderr
    assert "a: SLOs: 1 held, 1 broken, 0 no data; 1 firing" in again.stdout.splitlines()[-1]
    once = prober("run", "--suite", "latency", "--target", "b", "--summary", *QUICK,
                  "--config", str(tmp / "prober.toml"), cwd=tmp)
    assert once.returncode == 1, once.stderr
    # --summary: stdout is the verdict line alone; the table and the FIRING line are on stderr.
    assert once.stdout.splitlines() == ["b: SLOs: 1 held, 1 broken, 0 no data; 1 firing"], once.stdout
    assert "FIRING [warning] " in once.stderr or "FIRING [critical] " in once.stderr


def test_runs_json_round_trips_the_store(judged_run):
    tmp, _ = judged_run
    done = prober("runs", "--json", "--limit", "5", cwd=tmp)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["schema"] == "prober.runs/1"
    with Store.open(f"sqlite:///{tmp}/prober.db", create=False) as store:
        stored = store.list_runs(limit=5)
    assert [r["id"] for r in document["runs"]] == [r["id"] for r in stored]
    for shown, row in zip(document["runs"], stored, strict=True):
        assert {"id", "suite", "site", "batch", "status", "started_at", "finished_at", "targets", "samples",
                "errors"} <= set(shown)
        assert shown["started_at"] == row["started_at"].isoformat()
        assert (shown["status"], shown["samples"], shown["errors"]) == (row["status"], row["sample_count"],
                                                                        row["error_count"])
        assert isinstance(shown["samples"], int) and isinstance(shown["targets"], list)
        assert [t["target"] for t in shown["targets"]] == list(row["target_status"])


def test_show_json_round_trips_metrics_and_slo_states(judged_run):
    tmp, done = judged_run
    run_id = json.loads(done.stdout)["run_id"]
    shown = prober("show", run_id, "--json", "--target", "a", cwd=tmp)
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["schema"] == "prober.show/1"
    assert set(document) == {"schema", "run", "entries", "metrics", "slo"}
    assert document["run"]["id"] == run_id
    with Store.open(f"sqlite:///{tmp}/prober.db", create=False) as store:
        stored = [m for m in store.metrics(run_id) if m["target"] == "a"]
    assert len(document["metrics"]) == len(stored) > 0
    assert {(m["name"], json.dumps(m["labels"], sort_keys=True)) for m in document["metrics"]} == {
        (m["name"], json.dumps(m["labels"], sort_keys=True)) for m in stored}
    assert all(isinstance(m["value"], (int, float)) or m["value"] is None for m in document["metrics"])
    states = {(s["rule"], s["target"]): s for s in document["slo"]}
    assert states[("loose_ttft", "a")]["state"] == "held"
    assert states[("impossible_ttft", "a")]["state"] == "broken" and states[("impossible_ttft", "a")]["for"] == 2


def test_history_json_takes_label_and_the_old_labels_spelling(judged_run):
    tmp, _ = judged_run
    documents = []
    for spelling in ("--label", "--labels"):
        done = prober("history", "--metric", "ttft_p50_ms", "--target", "a", spelling, "concurrency=1", "--json",
                      cwd=tmp)
        assert done.returncode == 0, done.stderr
        documents.append(json.loads(done.stdout))
    assert documents[0] == documents[1]
    document = documents[0]
    assert (document["schema"], document["metric"]) == ("prober.history/1", "ttft_p50_ms")
    with Store.open(f"sqlite:///{tmp}/prober.db", create=False) as store:
        stored = [m for m in store.metric_history(target="a", name="ttft_p50_ms")
                  if (m["labels"] or {}).get("concurrency") == 1]
    assert [v["run_id"] for v in document["values"]] == [m["run_id"] for m in stored]
    assert [v["value"] for v in document["values"]] == [m["value"] for m in stored]
    assert all(v["labels"]["concurrency"] == 1 and v["target"] == "a" for v in document["values"])
    helped = prober("history", "--help", cwd=tmp)
    assert "--label" in helped.stdout and "--labels" not in helped.stdout
