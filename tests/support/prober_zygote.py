"""A started interpreter that forks a fresh `prober` process per request (tests/support/cli.py).

Each `prober` a test starts used to pay a new interpreter and its third-party imports (sqlalchemy,
typer, rich, pydantic, numpy, scipy, jinja2: about 0.6 s of CPU), several hundred times per
`make test-fast`. This process imports those once and forks a child for each command, which is
still a process of its own: its own working directory, environment, standard streams, exit code
and signals, and the project's modules imported fresh after the environment is set (module-level
code that reads the environment sees the test's). It imports nothing of the project itself. Its
children start their sample writers from the test session's fork server
(tests/support/writer_fork_server.py).

Protocol, one JSON line each way on stdin/stdout: {"args", "cwd", "env", "timeout"} in;
{"returncode", "stdout", "stderr", "timeout"} out (a server left running: see serve). The child
runs prober.commands.cli as `-m` does (runpy, as `__main__`), so click names the program and a spawned
sample writer re-imports the main module just as they do under `python -m prober`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import traceback

from tests.support import writer_fork_server

# Third-party and standard-library modules only: the project's are imported in each child, after its
# environment is set. The list is what a `prober run` and a `prober report` import beyond the
# interpreter's start (scipy.stats alone is 0.5 s of CPU, imported by the drift tests of every run;
# pydantic's package imports its parts lazily, so they are named).
PRELOADED = ("sqlalchemy", "sqlalchemy.orm", "sqlalchemy.dialects.sqlite", "sqlite3", "typer", "rich.console",
             "rich.table", "rich.progress", "rich.markup", "rich._emoji_codes", "pydantic.main", "pydantic.fields",
             "pydantic.json_schema", "pydantic.type_adapter", "numpy", "scipy.special", "scipy.stats", "jinja2",
             "multiprocessing.queues", "multiprocessing.connection", "asyncio", "email.message", "http.client",
             "urllib.parse", "zoneinfo", "tomllib", "asyncio_throttle")


def _child(args: list[str], cwd: str, env: dict[str, str], out_path: str, err_path: str) -> None:
    """In the forked child: become `python -m prober ARGS` in `cwd` with `env`; never returns."""
    import runpy

    code = 1
    try:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        # What the interpreter does with PYTHONPATH at start-up: its entries first on sys.path, and
        # a sitecustomize among them run (tests/support/no_sockets refuses a unit test's sockets).
        entries = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
        sys.path[1:1] = entries
        for entry in entries:
            site = os.path.join(entry, "sitecustomize.py")
            if os.path.exists(site):
                runpy.run_path(site, run_name="sitecustomize")
                break
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, out_path), (2, err_path)):
            target = os.open(path, os.O_WRONLY | os.O_TRUNC)
            os.dup2(target, fd)
            os.close(target)
        sys.argv = ["-m", *args]
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            runpy.run_module("prober", run_name="__main__", alter_sys=True)   # what `-m prober` does
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            if isinstance(exit_.code, str):
                print(exit_.code, file=sys.stderr)
        except BaseException:   # what the interpreter prints for an uncaught exception
            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _wait(pid: int, timeout: float | None, kill: bool = True) -> int | None:
    """The child's exit code, or None when it is still running after `timeout` s (0: just look),
    in which case it is killed first if `kill`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if deadline is not None and time.monotonic() >= deadline:
            if not kill:
                return None
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.005)


def _run(request: dict) -> dict:
    """A command run to its end (or its timeout): its exit code and output."""
    with tempfile.TemporaryDirectory(prefix="prober-zygote-") as scratch:
        out_path, err_path = os.path.join(scratch, "stdout"), os.path.join(scratch, "stderr")
        for path in (out_path, err_path):
            open(path, "w").close()
        pid = _fork(request, out_path, err_path)
        returncode = _wait(pid, request.get("timeout"))
        with open(out_path, encoding="utf-8", errors="replace") as out, \
                open(err_path, encoding="utf-8", errors="replace") as err:
            return {"returncode": returncode, "stdout": out.read(), "stderr": err.read(),
                    "timeout": returncode is None}


def _fork(request: dict, out_path: str, err_path: str) -> int:
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        _child(request["args"], request["cwd"], request["env"], out_path, err_path)
    return pid


def serve() -> None:
    """Requests: a command to run to its end; {"background": true, "stderr_path"} to start one and
    answer its pid at once (a server such as `prober emulate`), its stdout discarded; {"wait": pid,
    "timeout"} for a background command's exit code (None while it runs), as Popen.wait does."""
    for name in PRELOADED:
        __import__(name)
    if writer_fork_server.ENV in os.environ:
        writer_fork_server.share(os.environ[writer_fork_server.ENV])
    for line in sys.stdin:
        request = json.loads(line)
        if "wait" in request:
            reply = {"returncode": _wait(request["wait"], request["timeout"], kill=False)}
        elif request.get("background"):
            reply = {"pid": _fork(request, os.devnull, request["stderr_path"])}
        else:
            reply = _run(request)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
