"""Outside a terminal, a long level says where it is at least every PROBER_PROGRESS_INTERVAL_S
seconds: a UTC timestamp, done/total and an ETA, until a last line with done == total."""

from __future__ import annotations

import datetime as dt
import itertools
import re
import threading
import time

import pytest

from tests.support.cli import prober
from tests.support.timing import timing_sensitive

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(300)]

INTERVAL_S = 0.4
LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) emulator latency c=1: (\d+)/(\d+) requests, "
                  r"(\d+) failed, [\d.]+s, (eta (?:\d+:\d\d:\d\d|\?)|done)$")


def _wake_lateness_s() -> float:
    """How late this machine wakes a thread from a timed wait right now: the slack's reference."""
    worst = 0.0
    for _ in range(5):
        start = time.monotonic()
        threading.Event().wait(0.05)
        worst = max(worst, time.monotonic() - start - 0.05)
    return worst


@timing_sensitive
def test_a_long_level_prints_a_timestamped_line_every_interval(tmp_path):
    run = prober("run", "--suite", "latency", "--target", "emulator", "--db", f"sqlite:///{tmp_path}/p.db",
                 "--param", "levels=[1]", "--param", "requests_per_level=60", "--param", "warmup=0",
                 "--param", "max_tokens=24", cwd=tmp_path, env={"PROBER_PROGRESS_INTERVAL_S": str(INTERVAL_S)})
    assert run.returncode == 0, run.stdout + run.stderr
    slack_s = INTERVAL_S * 0.5 + 20 * _wake_lateness_s()
    lines = [line for line in (run.stdout + run.stderr).splitlines() if "latency c=1:" in line]
    matches = [LINE.match(line) for line in lines]
    assert all(matches), lines
    assert len(lines) >= 4, f"the level was too short to need several lines: {lines}"
    stamps = [dt.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")) for m in matches if m]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(stamps)]
    assert max(gaps) <= INTERVAL_S + slack_s, (gaps, slack_s)
    done = [(int(m.group(2)), int(m.group(3))) for m in matches if m]
    assert all(total == 60 for _, total in done)
    assert [d for d, _ in done] == sorted(d for d, _ in done)
    assert done[-1] == (60, 60) and lines[-1].endswith(", done")
    assert all(m.group(5).startswith("eta") for m in matches[:-1] if m)
    assert any(re.search(r"eta \d+:\d\d:\d\d$", line) for line in lines[:-1])   # a rate gives a time
