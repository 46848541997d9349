"""`prober status` on bad input and on an empty store: one `error:` line and exit 2 for a bad
--since or an unknown --target; a configured target that never ran is "no data", and exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import prober

pytestmark = pytest.mark.unit


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "prober.toml"
    path.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "p.db"}"\n'
                    '[targets.a]\nprotocol = "openai"\nmodel = "m"\nemulator = { }\n')
    return path


@pytest.mark.parametrize(("args", "wanted"), [(["--since", "bogus"], "error: --since 'bogus'"),
                                              (["--target", "nope"], "error: --target 'nope'")])
def test_bad_input_is_one_error_line_and_exit_2(tmp_path: Path, args: list[str], wanted: str) -> None:
    done = prober("status", *args, "--config", str(_config(tmp_path)), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and done.stderr.startswith(wanted)
    assert "Traceback" not in done.stderr


def test_a_target_that_never_ran_has_no_data_and_exits_1(tmp_path: Path) -> None:
    done = prober("status", "--json", "--config", str(_config(tmp_path)), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert [(row["target"], row["state"], row["run_id"]) for row in json.loads(done.stdout)] == [("a", "no data", "")]
