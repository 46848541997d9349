"""The fleet's options as a user types them: a bad --shard, --batch or PROBER_SITE is one line and
exit 2 before anything is sent or stored; a shard with no target to run says so and exits 0."""

from __future__ import annotations

import pytest

from prober.store import Store
from tests.support.cli import assert_one_clear_line, prober

pytestmark = pytest.mark.unit

CONFIG = ('[store]\nurl = "sqlite:///{db}"\n\n[targets.a]\nprotocol = "openai"\nmodel = "m"\n[targets.a.emulator]\n\n'
          '[targets.b]\nprotocol = "openai"\nmodel = "m"\n[targets.b.emulator]\n')


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "prober.toml"
    path.write_text(CONFIG.format(db=tmp_path / "p.db"))
    return path


@pytest.mark.parametrize("shard", ["2/2", "1/0", "-1/2", "one/two", "1"])
def test_a_bad_shard_is_one_line_and_exit_2(tmp_path, config, shard):
    ran = prober("run", "--suite", "latency", "--config", str(config), "--shard", shard, cwd=tmp_path)
    assert_one_clear_line(ran, f"--shard {shard!r}", "expected I/N with 0 <= I < N")
    assert not (tmp_path / "p.db").exists()


def test_an_unknown_target_is_an_error_on_every_shard(tmp_path, config):
    ran = prober("run", "--suite", "latency", "--config", str(config), "--target", "nope", "--target", "a",
                 "--shard", "0/2", cwd=tmp_path)
    assert_one_clear_line(ran, "unknown target 'nope'")


@pytest.mark.parametrize("env, args, named", [({"PROBER_SITE": "fra/x"}, [], "environment variable PROBER_SITE"),
                                              ({"PROBER_BATCH": "a b"}, [], "environment variable PROBER_BATCH"),
                                              ({}, ["--batch", "<night>"], "--batch")])
def test_a_bad_site_or_batch_is_one_line_and_exit_2(tmp_path, config, env, args, named):
    ran = prober("run", "--suite", "latency", "--config", str(config), *args, cwd=tmp_path, env=env)
    assert_one_clear_line(ran, named, "is not a usable name")
    assert not (tmp_path / "p.db").exists()


def test_a_shard_beyond_the_targets_runs_nothing_and_exits_0(tmp_path, config):
    ran = prober("run", "--suite", "latency", "--config", str(config), "--shard", "2/3", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "shard 2/3: no target falls to this shard" in ran.stderr
    assert not (tmp_path / "p.db").exists()


def test_report_of_an_unknown_batch_is_one_line_and_exit_2(tmp_path, config):
    Store.open(f"sqlite:///{tmp_path / 'p.db'}").close()
    ran = prober("report", "--batch", "2026-12-01", "--config", str(config), "--out", str(tmp_path / "r"),
                 cwd=tmp_path)
    assert_one_clear_line(ran, "--batch '2026-12-01': no run of this batch in sqlite:///")


def test_the_store_url_can_come_from_prober_db(tmp_path, config):
    """A pod passes its store URL (with its password) in PROBER_DB, never on the command line."""
    from tests.store.test_store_roundtrip import make_run

    elsewhere = f"sqlite:///{tmp_path / 'from-env.db'}"
    with Store.open(elsewhere) as store:
        store.create_run(make_run("run-from-env"))
    ran = prober("runs", "--config", str(config), cwd=tmp_path, env={"PROBER_DB": elsewhere})
    assert ran.returncode == 0, ran.stderr
    assert "run-from-env" in ran.stdout
    assert not (tmp_path / "p.db").exists()
