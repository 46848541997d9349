"""The live progress bar (a terminal) shows the time a level will still take at its rate so far."""

from __future__ import annotations

import io
import re
import time

import pytest
from rich.console import Console

from prober.run.progress import RunProgress

pytestmark = pytest.mark.unit


def _bar_after(done: int, total: int) -> str:
    console = Console(file=io.StringIO(), force_terminal=True, width=120, color_system=None)
    with RunProgress(console) as progress:
        task = progress.start_task("emulator latency concurrency=4", total)
        for _ in range(done):
            time.sleep(0.02)
            progress.advance(task)
    output = console.file.getvalue()      # type: ignore[attr-defined]
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output).strip().splitlines()[-1]


def test_the_bar_shows_an_eta_once_it_has_a_rate():
    half = _bar_after(10, 20)
    assert "10/20" in half and "0 failed" in half
    eta = re.search(r"eta (\d+:\d\d:\d\d|-:--:--)", half)
    assert eta is not None, half
    assert eta.group(1) != "-:--:--"          # ten requests give it a rate: a time, not a placeholder
    hours, minutes, seconds = map(int, eta.group(1).split(":"))
    assert hours == minutes == 0 and seconds <= 5  # ten more at about 50 a second
    assert "eta -:--:--" in _bar_after(0, 20)        # no rate yet: says it does not know


def _screen(console: Console) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", console.file.getvalue())  # type: ignore[attr-defined]


def test_the_suite_has_an_overall_bar_and_a_finished_bar_stops_its_clock():
    console = Console(file=io.StringIO(), force_terminal=True, width=140, color_system=None)
    with RunProgress(console) as progress:
        progress.start_suite("caching", 2)
        for name in ("repeat", "min_prefix"):
            task = progress.start_task(f"emulator caching {name}", 5)
            for _ in range(3):            # an adaptive case that stops before its upper bound
                progress.advance(task, failed=name == "repeat")
            progress.finish_task(task)
            progress.entry_done()
        progress.finish_suite()
        bars = progress._bars
        assert bars is not None and len(bars.tasks) == 3
        assert all(t.finished for t in bars.tasks)          # ended at what they sent: complete
        stopped = [t.elapsed for t in bars.tasks]
        time.sleep(0.2)
        assert [t.elapsed for t in bars.tasks] == stopped   # finished: the clocks no longer run
    last = _screen(console).strip().splitlines()
    suite_line = [line for line in last if "suite caching (entries)" in line][-1]
    assert "2/2" in suite_line and "3 failed" in suite_line, suite_line
    assert any("emulator caching min_prefix" in line and "3/3" in line for line in last), last
