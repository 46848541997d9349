"""After `prober init`, the Quick start's `--target local` names how to get the built-in target
back: `prober init` writes it commented out in prober.toml."""

import pytest

from tests.support.cli import prober

pytestmark = pytest.mark.unit


def test_a_commented_out_built_in_target_says_how_to_enable_it(tmp_path):
    assert prober("init", cwd=tmp_path).returncode == 0
    done = prober("run", "--suite", "latency", "--target", "local", "--dry-run", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: prober.toml: unknown target 'local' (configured: emulator); it is built in: uncomment "
        "[targets.local] in prober.toml"]


def test_an_unknown_target_that_is_not_built_in_gets_no_such_hint(tmp_path):
    assert prober("init", cwd=tmp_path).returncode == 0
    done = prober("run", "--suite", "latency", "--target", "nowhere", "--dry-run", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: prober.toml: unknown target 'nowhere' (configured: emulator)"
