"""The documented cron recipe (docs/operations.md, "cron"; issue 32, item 3) under `env -i`, an
environment as bare as cron's: the full output goes to the log, and stdout, which cron mails
whenever there is any, carries the `--summary` verdict lines only when the exit code is not 0."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.emulator

PROBER = Path(sys.executable).parent / "prober"
ROOT = Path(__file__).resolve().parents[2]
# The documented nightly line and the parts of it that are the operator's: the schedule, the
# directory, the venv's prober and the suite and targets. The rest of the line is run as written.
DOCUMENTED_RUN = re.compile(r"^15 3 \* \* \* (cd /srv/prober && out=\$\(\.venv/bin/prober run --suite nightly "
                            r"--target anthropic --target openai (.*))$", re.MULTILINE)
PARAMS = "--param levels=[1] --param requests_per_level=12 --param warmup=0"


def _documented_recipe(doc: Path) -> str:
    (match,) = DOCUMENTED_RUN.finditer(doc.read_text(encoding="utf-8"))
    return match.group(1)


def _recipe() -> str:
    """docs/operations.md's cron line with this test's directory, prober, suite and parameters."""
    line = _documented_recipe(ROOT / "docs" / "operations.md")
    return (line.replace("cd /srv/prober", "cd {dir}", 1).replace(".venv/bin/prober", "{prober}", 1)
            .replace("--suite nightly --target anthropic --target openai", "--suite latency {params}", 1))


def test_the_readme_and_operations_md_document_the_same_cron_line():
    assert _documented_recipe(ROOT / "README.md") == _documented_recipe(ROOT / "docs" / "operations.md")
    assert "--summary 2>>prober.log" in _recipe()


def _cron(tmp: Path, threshold: float) -> subprocess.CompletedProcess[str]:
    rule = f'{{ name = "ttft_bound", metric = "ttft_p50_ms", labels = {{ concurrency = 1 }}, comparator = "<=", ' \
           f'threshold = {threshold} }}'
    (tmp / "prober.toml").write_text(f'store = {{ url = "sqlite:///{tmp}/prober.db" }}\n'
                                     'targets = { emulator = { protocol = "openai", model = "emulator-1", '
                                     'emulator = {} } }\n'
                                     f'slo = [{rule}]\n')
    line = _recipe().format(dir=tmp, prober=PROBER, params=PARAMS)
    # What cron gives a job: HOME, LOGNAME, SHELL, PATH=/usr/bin:/bin, no terminal, nothing else.
    return subprocess.run(["env", "-i", f"HOME={tmp}", "LOGNAME=root", "SHELL=/bin/sh", "PATH=/usr/bin:/bin",
                           "/bin/sh", "-c", line], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_the_cron_recipe_mails_nothing_when_every_slo_held(tmp_path):
    done = _cron(tmp_path, threshold=100000)
    assert (done.stdout, done.stderr) == ("", "")         # nothing for cron to mail
    log = (tmp_path / "prober.log").read_text()
    assert "ttft_p50_ms" in log and "samples stored in" in log     # the full output is in the log
    assert log.rstrip().endswith("emulator: SLOs: 1 held, 0 broken, 0 no data")


def test_the_cron_recipe_mails_the_summary_when_an_alert_fired(tmp_path):
    done = _cron(tmp_path, threshold=0)
    assert done.stderr == ""
    assert done.stdout.splitlines() == ["emulator: SLOs: 0 held, 1 broken, 0 no data; 1 firing"]
    log = (tmp_path / "prober.log").read_text()
    assert "FIRING [warning] " in log and "ttft_p50_ms" in log
