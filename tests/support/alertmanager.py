"""A throwaway Prometheus Alertmanager for the tests, from Debian's `prometheus-alertmanager`.

It listens on a free port on 127.0.0.1, with clustering off, a minimal config (one receiver
with no integrations: the alerts stay visible in the API, nothing is sent anywhere) and its
storage in a temporary directory, removed at the end. Set PROBER_ALERTMANAGER to use another
binary.

    from tests.support.alertmanager import alertmanager_url  # noqa: F401

    def test_something(alertmanager_url): ...   # http://127.0.0.1:PORT

`current_alerts(url)` reads GET /api/v2/alerts. A missing binary FAILS the tests rather than
skipping them: CI must run them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

DEBIAN_PACKAGE = "prometheus-alertmanager"
CONFIG = """\
route:
  receiver: tests
  group_wait: 1s
receivers:
  - name: tests
"""


class AlertmanagerUnavailable(RuntimeError):
    pass


def find_binary() -> str:
    override = os.environ.get("PROBER_ALERTMANAGER")
    found = override or shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if not found:
        raise AlertmanagerUnavailable(f"prometheus-alertmanager not found on PATH; install the Debian package: "
                                      f"apt-get install -y {DEBIAN_PACKAGE}")
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Alertmanager:
    def __init__(self) -> None:
        self.binary = find_binary()
        self.base = Path(tempfile.mkdtemp(prefix="prober-am-"))
        (self.base / "alertmanager.yml").write_text(CONFIG)
        self.log = self.base / "alertmanager.log"
        self.port: int | None = None
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        for _ in range(3):   # the free port can be taken between choosing and binding it
            self.port = _free_port()
            with open(self.log, "ab") as log:
                self.process = subprocess.Popen(
                    [self.binary, f"--config.file={self.base / 'alertmanager.yml'}",
                     f"--storage.path={self.base / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                     "--cluster.listen-address=", "--log.level=warn"],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.process.poll() is None:
                try:
                    with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                        if response.status == 200:
                            return
                except OSError:
                    time.sleep(0.2)
            self.stop_process()
        tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])
        raise AlertmanagerUnavailable(f"alertmanager did not become ready:\n{tail}")

    def stop_process(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def stop(self) -> None:
        self.stop_process()
        shutil.rmtree(self.base, ignore_errors=True)


def current_alerts(url: str) -> list[dict]:
    """GET /api/v2/alerts: the alerts Alertmanager holds (active, silenced, inhibited)."""
    with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=10) as response:
        return json.load(response)


def received_totals(url: str) -> dict[str, float]:
    """Alertmanager's own count of the alerts it was sent, by status ("firing", "resolved"), from
    its /metrics (alertmanager_alerts_received_total, summed over API versions). The API lists a
    resolved alert no more, so this is what shows that a resolve arrived rather than nothing."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    totals = {"firing": 0.0, "resolved": 0.0}
    for line in text.splitlines():
        if line.startswith("alertmanager_alerts_received_total{"):
            labels, value = line.rsplit(" ", 1)
            for status in totals:
                if f'status="{status}"' in labels:
                    totals[status] += float(value)
    return totals


@pytest.fixture(scope="session")
def alertmanager_url() -> Iterator[str]:
    """The base URL of a running throwaway Alertmanager, shared by the session."""
    server = None
    try:
        server = Alertmanager()
        server.start()
    except AlertmanagerUnavailable as exc:
        if server is not None:
            server.stop()
        pytest.fail(f"Alertmanager for the tests: {exc}", pytrace=False)
    try:
        yield server.url
    finally:
        server.stop()
