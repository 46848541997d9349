"""A real HTTP proxy for the tests: Debian's tinyproxy, started on a free loopback port with its
own config and log file, and a self-signed certificate for an https server behind it."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.llama import free_port
from tests.support.processes import listening_process


@dataclass
class Tinyproxy:
    url: str
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@contextmanager
def tinyproxy(tmp_path: Path) -> Iterator[Tinyproxy]:
    binary = shutil.which("tinyproxy")
    if binary is None:
        raise RuntimeError("tinyproxy is not installed: scripts/install-system-deps.sh installs it")
    port = free_port()
    log = tmp_path / "tinyproxy.log"
    config = tmp_path / "tinyproxy.conf"
    # No ConnectPort line: CONNECT is allowed to any port (the https server's is random).
    config.write_text(f'Port {port}\nListen 127.0.0.1\nTimeout 30\nLogFile "{log}"\nLogLevel Info\n'
                      f'MaxClients 50\nAllow 127.0.0.1\nPidFile "{tmp_path / "tinyproxy.pid"}"\n')
    with listening_process([binary, "-d", "-c", str(config)], port, "tinyproxy", timeout=10):
        yield Tinyproxy(f"http://127.0.0.1:{port}", log)


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1 and localhost, made with the openssl command."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key
