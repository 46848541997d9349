"""Commands that only read never create a database (issue 32, item 7): in an empty directory each
says in one line that there is no store, exits 2, and leaves no prober.db behind."""

import pytest

from tests.support.cli import prober

pytestmark = pytest.mark.unit

READ_ONLY = [["runs"], ["report"], ["report", "--format", "md"], ["show", "abc123"],
             ["history", "--metric", "ttft_p50_ms"], ["export", "--format", "csv"], ["samples", "abc123"],
             ["compare", "abc123", "def456"], ["prune"]]


@pytest.mark.parametrize("args", READ_ONLY, ids=" ".join)
def test_a_read_only_command_in_an_empty_directory_creates_no_store(tmp_path, args):
    done = prober(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip() == "error: no store at sqlite:///prober.db; run `prober run` first (or pass --db / " \
                                  "set PROBER_DB)"
    assert list(tmp_path.iterdir()) == []


def test_the_database_flag_names_the_missing_file(tmp_path):
    done = prober("runs", "--db", f"sqlite:///{tmp_path}/elsewhere.db", cwd=tmp_path)
    assert done.returncode == 2 and f"no store at sqlite:///{tmp_path}/elsewhere.db" in done.stderr
    assert not (tmp_path / "elsewhere.db").exists()
