"""A real llama-server for the tests, started once per configuration and shared by the session.

The binary and the model come from the shared cache (`prober local install`, run by `make test`
before pytest), so a test session never builds anything itself unless the cache is empty.
"""

from __future__ import annotations

import socket

import pytest

from prober.local import server as local


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LlamaServers:
    def __init__(self) -> None:
        self._running: dict[tuple, local.LocalServer] = {}

    def get(self, slots: int | None = None, ctx_size: int | None = None) -> local.LocalServer:
        """A healthy server with these settings, started on first use (slots=None: llama-server's
        default, 4 slots sharing one unified KV cache)."""
        key = (slots, ctx_size)
        if key not in self._running:
            self._running[key] = local.start(port=free_port(), slots=slots, ctx_size=ctx_size)
        return self._running[key]

    def stop_all(self) -> None:
        for server in self._running.values():
            local.stop(server.port)
        self._running.clear()


@pytest.fixture(scope="session")
def llama_servers():
    servers = LlamaServers()
    yield servers
    servers.stop_all()
