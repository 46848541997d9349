"""Loaded by Python processes a `unit` test starts (tests/conftest.py puts this directory first on
their PYTHONPATH): a child that connects or binds a socket writes what it tried to the file the
test names and is refused, so that a `unit` test cannot open sockets through a `prober` child.
A Unix-domain socket reaches no network and is allowed (tests/conftest.py says why)."""

import os
import socket

_LOG = os.environ.get("PROBER_TESTS_SOCKET_LOG")

if _LOG:
    def _refuse(operation: str):
        allowed = getattr(socket.socket, operation)

        def refused(sock: socket.socket, address, *args, **kwargs):
            if sock.family == socket.AF_UNIX:
                return allowed(sock, address, *args, **kwargs)
            with open(_LOG, "a", encoding="utf-8") as log:
                log.write(f"pid {os.getpid()} tried to {operation} {address!r}\n")
            raise PermissionError(f"a unit test's child process may not {operation} a socket ({address!r})")
        return refused

    for _operation in ("connect", "connect_ex", "bind"):
        setattr(socket.socket, _operation, _refuse(_operation))
