"""Progress on long runs: every suite reports each stage it runs, with the requests it sent, as a
timestamped line per stage when the output is not a terminal (cron logs, CI), ending in `done`."""

import re

import pytest

from tests.support.cli import prober

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(300)]


def _lines(tmp_path, suite, *params):
    args = [arg for param in params for arg in ("--param", param)]
    run = prober("run", "--suite", suite, "--target", "emulator", "--db", f"sqlite:///{tmp_path}/p.db", *args,
                 cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    # Each level's last line, its timestamp and time taken left out.
    return [re.sub(r"^\S+Z |, [\d.]+s, done$", "", line) for line in (run.stdout + run.stderr).splitlines()
            if re.search(r"requests, \d+ failed, [\d.]+s, done$", line)]


def test_penalty_reports_its_grid(tmp_path):
    lines = _lines(tmp_path, "penalty", 'modes=["unconstrained"]', "n_records=[2]", "temperatures=[0.0]",
                   "penalties={frequency_penalty = [1.0]}", "repeats=2", "baseline_repeats=2")
    # the Messages API refuses penalty fields: the adapter retries without them, one request each
    assert lines == ["emulator penalty grid: 6/6 requests, 0 failed"]


def test_schema_order_reports_each_look(tmp_path):
    lines = _lines(tmp_path, "schema_order", "limit=6", "sequential=true", "looks=2")
    assert lines == [
        "emulator schema_order look 1/2: 6/6 requests, 0 failed",
        "emulator schema_order look 2/2: 6/6 requests, 0 failed"]


def test_caching_reports_each_case_with_the_requests_it_sent(tmp_path):
    lines = _lines(tmp_path, "caching", 'cases=["repeat", "volatile"]', "requests=3", "max_tokens=4",
                   'volatile_positions=["system_start"]')
    assert lines == [
        "emulator caching repeat: 3/3 requests, 0 failed",
        "emulator caching volatile: 3/3 requests, 0 failed"]
