"""Servers the tests start as child processes: wait until one listens, stop it afterwards."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prober.local.build import stop_child


@contextmanager
def listening_process(args: list[str], port: int, what: str, timeout: float) -> Iterator[subprocess.Popen]:
    """Start `args`, wait until 127.0.0.1:`port` accepts connections, yield the process, and stop it
    on the way out. A process that exits or never listens raises with its stderr."""
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with listening(process, port, what, timeout):
        yield process


@contextmanager
def listening(process: Any, port: int, what: str, timeout: float) -> Iterator[None]:
    """`process` (started, a Popen or tests/support/cli.py's BackgroundProber), once 127.0.0.1:`port`
    accepts connections; stopped on the way out."""
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    stderr = process.stderr.read().decode() if process.stderr and process.poll() is not None else ""
                    raise RuntimeError(f"{what} did not start: {stderr}") from None
                time.sleep(0.05)
        yield
    finally:
        stop_child(process)
