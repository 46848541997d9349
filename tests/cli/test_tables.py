"""CLI tables at 80 columns: `prober show` and `prober runs` fit, wrap words and never cut a value;
`prober show --probe --label` filters a run's metrics."""

from __future__ import annotations

import socket

import pytest

from prober.commands.terminal import fmt
from prober.core.config import ProberConfig
from prober.core.records import Metric, default_site
from prober.run.runner import Runner
from prober.store import Store
from tests.support.cli import prober

LONG_LABEL = "a_label_value_far_longer_than_any_column_of_an_eighty_column_terminal_could_hold"


@pytest.fixture(scope="module")
def caching_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tables")
    config = ProberConfig.model_validate({
        "targets": {"emulator": {"protocol": "anthropic", "model": "emulator-1", "emulator": {}}},
        "store": {"url": f"sqlite:///{tmp}/prober.db"}, "runner": {"progress": False}})
    result = Runner(config).run("caching", ["emulator"], {"cases": ["repeat", "volatile"], "requests": 2,
                                                          "max_tokens": 8})
    assert result.status == "complete", result.problems
    store = Store.open(config.store.url)
    store.write_metrics([Metric(result.run_id, "emulator", "caching", "a_metric_name_that_is_rather_long_too",
                                123456.789, {"case": "repeat", "note": LONG_LABEL}, 100000.0, 150000.0, 40, "tokens")])
    rows = store.metrics(result.run_id)
    store.close()
    (tmp / "prober.toml").write_text(f'[store]\nurl = "sqlite:///{tmp}/prober.db"\n')
    return tmp, result.run_id, rows


def _fits(stdout: str) -> None:
    lines = stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert "…" not in stdout and "..." not in stdout.replace(" .. ", "")


@pytest.mark.emulator
def test_show_fits_80_columns_without_cutting_values(caching_run):
    tmp, run_id, rows = caching_run
    shown = prober("show", run_id, cwd=tmp, env={"COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    table = shown.stdout.split("emulator / caching", 1)[1]
    _fits(table)
    assert len(rows) > 20
    for row in rows:             # every value whole, on its row
        if row["value"] is not None:
            assert fmt(row["value"]) in table, row
    assert "123,457" in table and "100,000 .. 150,000" in table
    # the long label wraps (folds) over lines instead of being cut: all of it is there
    assert LONG_LABEL in "".join(line.split("│")[1].strip() for line in table.splitlines() if line.count("│") > 2)


@pytest.mark.emulator
def test_show_filters_by_probe_and_label(caching_run):
    tmp, run_id, rows = caching_run
    repeat = [r for r in rows if r["labels"].get("case") == "repeat"]
    assert 0 < len(repeat) < len(rows)
    shown = prober("show", run_id[:8], "--probe", "caching", "--label", "case=repeat", cwd=tmp,
                   env={"COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    assert f"{len(repeat)} of {len(rows)} metrics" in shown.stdout
    table = shown.stdout.split("emulator / caching", 1)[1].split("└", 1)[0]
    assert "volatile" not in table and table.count("case=repeat") == len(repeat)    # a row each
    both = prober("show", run_id, "-l", "case=repeat,note=" + LONG_LABEL, cwd=tmp)
    assert both.returncode == 0 and "1 of " in both.stdout, both.stderr

    for args, says in ((["--label", "case=nope"], "has no metrics with case=nope (its probes: caching)"),
                       (["--probe", "latency"], "has no metrics with probe latency"),
                       (["--label", "case"], "--labels 'case': expected KEY=VALUE")):
        bad = prober("show", run_id, *args, cwd=tmp)
        assert bad.returncode == 2 and says in bad.stderr and "Traceback" not in bad.stderr, (args, bad.stderr)
        assert len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.emulator
def test_runs_fits_80_columns(caching_run):
    tmp, run_id, _ = caching_run
    listed = prober("runs", cwd=tmp, env={"COLUMNS": "80"})
    assert listed.returncode == 0, listed.stderr
    _fits(listed.stdout)
    assert run_id in listed.stdout and "complete" in listed.stdout


@pytest.mark.emulator
def test_history_fits_80_columns_with_constant_columns_in_its_title(caching_run):
    tmp, run_id, _ = caching_run
    result = prober("history", "--metric", "a_metric_name_that_is_rather_long_too", cwd=tmp, env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    _fits(result.stdout)
    # one target, one suite, one site, one unit, one status: said once in the title, not in a column each
    site = default_site(socket.gethostname())
    assert f"a_metric_name_that_is_rather_long_too, suite caching, target emulator, site {site}, unit tokens, " \
           "run status complete" in " ".join(result.stdout.split())
    header = next(line for line in result.stdout.splitlines() if "run started" in line)
    assert "suite" not in header and "target" not in header
    assert run_id in result.stdout and "123,457" in result.stdout and "100,000" in result.stdout
