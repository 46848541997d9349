"""How a sample writer starts: from multiprocessing's fork server (prober/run/sample_writer.py), which
must outlive a SIGTERM sent to the whole process group, since the writer's exit status reaches
the run through it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from prober.run.sample_writer import WRITER_MODULES
from tests.support.writer_fork_server import PRELOAD

pytestmark = pytest.mark.unit

# A run's shape: SIGTERM handled (the run stops, then flushes and closes its writer), the writer
# started, then SIGTERM to the whole group, as systemd and `timeout` send it.
RUN = textwrap.dedent("""
    import os, signal, sys, time
    from prober.run.sample_writer import SampleWriterProcess

    if __name__ == "__main__":
        signal.signal(signal.SIGTERM, lambda *_: None)
        writer = SampleWriterProcess(sys.argv[1], conformance=False)
        os.killpg(0, signal.SIGTERM)
        time.sleep(0.5)                  # the signal has reached every process of the group
        writer.flush()
        writer.close()
        try:
            os.kill(writer.pid, 0)
            print("the writer still runs after close")
        except ProcessLookupError:
            print("closed")
""")


def test_a_sigterm_to_the_whole_group_leaves_the_writer_to_be_closed(tmp_path):
    # A fork server killed by the SIGTERM reports the writer as dead (exit code 255) while it still
    # runs: close() would then return at once, before the writer stored and ended.
    done = subprocess.run([sys.executable, "-c", RUN, f"sqlite:///{tmp_path / 'p.db'}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, start_new_session=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "closed", done.stdout + done.stderr


def test_the_tests_fork_server_preloads_what_every_writer_imports():
    assert set(WRITER_MODULES) <= set(PRELOAD)
