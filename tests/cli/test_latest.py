"""`latest` wherever a run id is taken (issue 32, item 5): show, samples, compare and export --run,
and `latest --target T` for the newest run of one target."""

import pytest

from prober.core.config import ProberConfig
from prober.run.runner import Runner
from tests.support.cli import prober

pytestmark = pytest.mark.emulator

QUICK = {"levels": [1], "requests_per_level": 2, "warmup": 0}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("latest")
    emulator = {"protocol": "openai", "model": "emulator-1", "emulator": {}}
    config = ProberConfig.model_validate({"targets": {"a": emulator, "b": emulator},
                                          "store": {"url": f"sqlite:///{tmp}/prober.db"},
                                          "runner": {"progress": False}})
    older = Runner(config).run("latency", ["a"], QUICK)
    newer = Runner(config).run("latency", ["b"], QUICK)
    assert older.status == newer.status == "complete"
    (tmp / "prober.toml").write_text(f'[store]\nurl = "sqlite:///{tmp}/prober.db"\n')
    return tmp, older.run_id, newer.run_id


def test_latest_is_the_newest_run_and_latest_target_the_newest_of_that_target(two_runs):
    tmp, older, newer = two_runs
    shown = prober("show", "latest", cwd=tmp)
    assert shown.returncode == 0, shown.stderr
    assert f"run {newer}" in shown.stdout and older not in shown.stdout
    of_a = prober("show", "latest", "--target", "a", cwd=tmp)
    assert of_a.returncode == 0, of_a.stderr
    assert f"run {older}" in of_a.stdout and f"run {newer}" not in of_a.stdout
    samples = prober("samples", "latest", "--target", "a", "--json", cwd=tmp)
    assert samples.returncode == 0 and samples.stdout.count(older) == 2, samples.stderr
    compared = prober("compare", "latest", older, "--format", "json", cwd=tmp)
    assert compared.returncode == 0, compared.stderr
    assert newer in compared.stdout and older in compared.stdout


def test_latest_of_a_target_with_no_run_is_one_line_and_exit_2(two_runs):
    tmp, _, _ = two_runs
    done = prober("show", "latest", "--target", "c", cwd=tmp)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: latest: no run of target c in sqlite:///{tmp}/prober.db"]
