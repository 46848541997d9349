"""`prober compare` as a user runs it: the three ways to pick sides, the formats, the table within
80 columns, and one clear line with exit code 2 for whatever cannot be compared."""

import json

import pytest

from prober.store import Store
from tests.support.cli import assert_one_clear_line, prober
from tests.support.history import add_run, share

pytestmark = pytest.mark.unit


@pytest.fixture
def db(tmp_path):
    url = f"sqlite:///{tmp_path}/p.db"
    with Store.open(url) as store:
        for night in range(4):
            add_run(store, f"fp16-{night}", night, [share("error_rate", 2, 60, concurrency=8),
                                                    {"name": "ttft_p50_ms", "value": 100 + night, "ci_low": 95.0,
                                                     "ci_high": 108.0, "n": 60, "unit": "ms",
                                                     "labels": {"concurrency": 8}}], target="fp16")
            add_run(store, f"int4-{night}", night, [share("error_rate", 20, 60, concurrency=8),
                                                    {"name": "ttft_p50_ms", "value": 70 + night, "ci_low": 66.0,
                                                     "ci_high": 76.0, "n": 60, "unit": "ms",
                                                     "labels": {"concurrency": 8}}], target="int4")
    return url



def test_two_runs_as_a_table_within_80_columns(tmp_path, db):
    done = prober("compare", "fp16-3", "int4-3", "--db", db, cwd=tmp_path)  # tests.support.cli gives rich 200 columns
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    assert "A: run fp16-3" in done.stdout and "target int4" in done.stdout
    rows = [line for line in done.stdout.splitlines() if "error_rate" in line or "ttft_p50_ms" in line]
    assert len(rows) == 2 and all("*" in row for row in rows)     # both significant


def test_two_targets_in_a_window_are_compared_run_by_run(tmp_path, db):
    done = prober("compare", "--target", "fp16", "--target", "int4", "--since", "2025-12-01", "--db", db,
                  "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert [len(found[side]["runs"]) for side in ("a", "b")] == [4, 4]
    by_name = {c["name"]: c for c in found["compared"]}
    assert by_name["ttft_p50_ms"]["test"] == "t over runs, log" and by_name["ttft_p50_ms"]["significant"]


def test_two_windows_of_one_target(tmp_path, db):
    done = prober("compare", "--target", "fp16", "--since", "2025-12-01", "--until", "2026-01-03T12:00",
                  "--db", db, "--format", "markdown", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "- A: 3 runs, target fp16" in done.stdout and "- B: run fp16-3" in done.stdout


def test_named_metrics_only(tmp_path, db):
    done = prober("compare", "fp16-0", "int4-0", "--metric", "error_rate", "--db", db, "--format", "json",
                  cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [c["name"] for c in json.loads(done.stdout)["compared"]] == ["error_rate"]


def test_html_page_is_written_where_asked(tmp_path, db):
    out = tmp_path / "site" / "compare.html"
    done = prober("compare", "fp16-0", "int4-0", "--db", db, "--format", "html", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out.resolve())
    assert "<table>" in out.read_text() and "Content-Security-Policy" in out.read_text()


@pytest.mark.parametrize(("args", "fragment"), [
    (["fp16-0"], "compare two runs"),
    (["--target", "fp16"], "compare two runs"),
    (["fp16-0", "nosuch"], "no run with id 'nosuch'"),
    (["--target", "fp16", "--target", "nosuch", "--since", "2025-12-01"],
     "side B: no run in which target 'nosuch' completed"),
    (["fp16-0", "int4-0", "--format", "pdf"], "--format 'pdf'"),
    (["--target", "fp16", "--since", "1d", "--until", "2d"], "--since must be before --until"),
    (["--target", "fp16", "--until", "2d"], "--until needs --since"),
    (["fp16-0", "int4-0", "--metric", "ttft_p50"],
     "--metric 'ttft_p50': no probe produces it (did you mean ttft_p50_ms"),
])
def test_what_cannot_be_compared_is_one_line_and_exit_2(tmp_path, db, args, fragment):
    assert_one_clear_line(prober("compare", *args, "--db", db, cwd=tmp_path), fragment)
