"""The sample-writer process runs below the run's CPU priority, its store thread included, so
that on a busy machine the event loop that stamps arrival times gets a core first."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from prober.run.sample_writer import WRITER_NICENESS, SampleWriterProcess

pytestmark = pytest.mark.unit


def _niceness(pid: int, tid: int) -> int:
    # Field 19 of /proc/PID/task/TID/stat; the command name (field 2) is in parentheses and may hold spaces.
    stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])


def test_every_thread_of_the_writer_runs_below_the_runs_priority(tmp_path):
    own = os.getpriority(os.PRIO_PROCESS, 0)
    writer = SampleWriterProcess(f"sqlite:///{tmp_path / 'prober.db'}", conformance=False)
    try:
        assert writer.pid is not None
        threads = sorted(int(tid) for tid in os.listdir(f"/proc/{writer.pid}/task"))
        assert len(threads) >= 2                  # its main thread and the store's writer thread
        assert {_niceness(writer.pid, tid) for tid in threads} == {min(19, own + WRITER_NICENESS)}
        assert os.getpriority(os.PRIO_PROCESS, 0) == own       # the run itself is left alone
    finally:
        writer.close()
