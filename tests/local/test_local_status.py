"""`prober local status` finds a server on its port whoever started it, and says whose it is;
`prober local stop` never kills a process that is not a llama-server."""

from __future__ import annotations

import http.server
import os
import socket
import threading
import urllib.request
from collections.abc import Iterator

import pytest

from tests.support.cli import prober

pytestmark = pytest.mark.emulator


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def someone_elses_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_status_finds_a_server_it_did_not_start_and_names_its_pid(tmp_path, someone_elses_server):
    env = {"PROBER_CACHE_DIR": str(tmp_path / "cache")}
    status = prober("local", "status", "--port", str(someone_elses_server), cwd=tmp_path, env=env)
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.strip() == (f"running, healthy: pid {os.getpid()} ({_comm()}), not started by prober, "
                                     f"http://127.0.0.1:{someone_elses_server}")


def test_stop_leaves_a_process_that_is_not_a_llama_server_alone(tmp_path, someone_elses_server):
    env = {"PROBER_CACHE_DIR": str(tmp_path / "cache")}
    stop = prober("local", "stop", "--port", str(someone_elses_server), cwd=tmp_path, env=env)
    assert (stop.returncode, stop.stdout.strip()) == (0, f"no llama-server on port {someone_elses_server}")
    with urllib.request.urlopen(f"http://127.0.0.1:{someone_elses_server}/health", timeout=5) as reply:
        assert reply.status == 200


def test_status_on_a_free_port_says_not_running(tmp_path):
    port = _free_port()
    status = prober("local", "status", "--port", str(port), cwd=tmp_path,
                    env={"PROBER_CACHE_DIR": str(tmp_path / "cache")})
    assert (status.returncode, status.stdout.strip()) == (1, f"not running (port {port})")


def _comm() -> str:
    with open(f"/proc/{os.getpid()}/comm") as fh:
        return fh.read().strip()
