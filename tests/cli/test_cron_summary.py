"""The documented cron recipe (docs/operations.md, "cron"; issue 32, item 3) under `env -i`, an
environment as bare as cron's: the full output goes to the log, and stdout, which cron mails
whenever there is any, carries the `--summary` verdict lines only when the exit code is not 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.emulator

PROBER = Path(sys.executable).parent / "prober"
# The docs' line, with the paths of this test: keep the two in step.
RECIPE = ('cd {dir} && out=$({prober} run --suite latency --config prober.toml {params} --summary 2>>prober.log); '
          'rc=$?; echo "$out" >>prober.log; [ $rc -eq 0 ] || echo "$out"')
PARAMS = "--param levels=[1] --param requests_per_level=12 --param warmup=0"


def _cron(tmp: Path, threshold: float) -> subprocess.CompletedProcess[str]:
    rule = f'{{ name = "ttft_bound", metric = "ttft_p50_ms", labels = {{ concurrency = 1 }}, comparator = "<=", ' \
           f'threshold = {threshold} }}'
    (tmp / "prober.toml").write_text(f'store = {{ url = "sqlite:///{tmp}/prober.db" }}\n'
                                     'targets = { emulator = { protocol = "openai", model = "emulator-1", '
                                     'emulator = {} } }\n'
                                     f'slo = [{rule}]\n')
    line = RECIPE.format(dir=tmp, prober=PROBER, params=PARAMS)
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
