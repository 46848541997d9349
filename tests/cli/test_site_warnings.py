"""A site that will not stay put is said, not silent (issue 32, item 1): two runs, each in its own UTS
namespace (`unshare -u`) with a container-like host name, as two `docker run`s get.

It never skips: as root `unshare -u` alone, otherwise inside a user namespace of its own
(`unshare -r -u`, which needs no privilege), so CI runs it whoever runs CI. Without unshare(1)
(util-linux) it fails naming it."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.support.emulated import emulator_process

pytestmark = pytest.mark.emulator

QUICK = "first_token_delay_ms = 1\ndecode_tokens_per_s = 2000\noutput_tokens = 4\nslots = 4\n"
PARAMS = ["--param", "levels=[1]", "--param", "requests_per_level=3", "--param", "warmup=0"]


def _unshare_uts() -> list[str]:
    """argv prefix for a UTS namespace of the process's own: root may make one directly, anyone
    else inside a user namespace where it maps to root."""
    assert shutil.which("unshare") is not None, "unshare(1) is missing: install util-linux"
    return ["unshare", "-u"] if os.geteuid() == 0 else ["unshare", "-r", "-u"]


def _run_as(hostname, tmp_path, config, env=None):
    argv = [*_unshare_uts(), "sh", "-c", 'hostname "$0" && exec "$@"', hostname, sys.executable, "-m", "prober",
            "run", "--suite", "latency", "--target", "emu", "--config", str(config), *PARAMS]
    environment = {k: v for k, v in os.environ.items() if k != "PROBER_SITE"} | (env or {})
    return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=environment | {"COLUMNS": "200"})


def test_generated_host_names_warn_and_a_new_site_without_baseline_is_named(tmp_path):
    with emulator_process(tmp_path, QUICK) as base_url:
        config = tmp_path / "prober.toml"
        config.write_text(f'[store]\nurl = "sqlite:///{tmp_path}/p.db"\n[runner]\nprogress = false\n'
                          f'[targets.emu]\nprotocol = "openai"\nbase_url = "{base_url}"\nmodel = "emulator-1"\n')
        first = _run_as("3f4e5d6c7b8a", tmp_path, config)
        second = _run_as("a1b2c3d4e5f6", tmp_path, config)
        settled = _run_as("a9b8c7d6e5f4", tmp_path, config, env={"PROBER_SITE": "fra"})
        again = _run_as("0123456789ab", tmp_path, config, env={"PROBER_SITE": "fra"})
    for done in (first, second, settled, again):
        assert done.returncode == 0, done.stdout + done.stderr
    for done, site in ((first, "3f4e5d6c7b8a"), (second, "a1b2c3d4e5f6")):
        assert f"site {site} comes from a generated host name" in done.stderr
        assert "set PROBER_SITE" in done.stderr
    # The second container's run has history only under the first container's site.
    assert "no earlier latency run from site a1b2c3d4e5f6, but runs from site 3f4e5d6c7b8a" in second.stderr
    assert "no earlier latency run" not in first.stderr
    # With PROBER_SITE set nothing is said about the host name; the first run at the new site still
    # says that its baseline is elsewhere, the next one is quiet: it has a baseline.
    assert "generated host name" not in settled.stderr + again.stderr
    assert "no earlier latency run from site fra" in settled.stderr
    assert "no earlier latency run" not in again.stderr
