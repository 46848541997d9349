"""One fork server for every sample writer a test session starts, with more preloaded.

A `prober run` starts its sample writer from multiprocessing's fork server (prober/run/sample_writer.py),
which imports the writer's modules once per process: once per run in production. A test session
starts about a hundred writers in a dozen processes (pytest-xdist's workers, their prober zygotes'
children), most with conformance on, where each writer also imported an SDK's types when its
first sample arrived (Anthropic's about 1.2 s of CPU, OpenAI's 0.5 s). So the session's first
process (pytest-xdist's controller, or pytest alone) starts one server with the SDK types and the
CLI preloaded too, from the environment it started with, and names its socket in ENV; every other
process of the session asks it for its writers (`share`), which then start in milliseconds.

multiprocessing meant its fork server for one process and its children: another process does not
know the socket, and `ensure_running` checks the server with waitpid, which only its parent may
call. So `share` sets the socket, hands the server a descriptor of its own where the server expects
its alive pipe (the server passes it to the writer, which starts no process of its own), and checks
only the resource tracker (each process has its own; the writer reports to the asker's). The server
ends when its starter closes the alive pipe (`stop`), after every writer was closed.

What a writer started here does not share with its run: the environment (the writer reads none;
the store URL and the secrets come with its arguments) and stderr, where a crashing writer would
print its traceback (the run still reports the writer's death: SampleStorageError). A `prober`
started as a plain subprocess (not from the zygote) starts its own server, as in production.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import signal
import time
from multiprocessing import resource_tracker

# The server's socket, for the session's other processes.
ENV = "PROBER_TESTS_WRITER_FORK_SERVER"

# The writer's modules (prober.run.sample_writer.WRITER_MODULES, checked by
# tests/runner/test_sample_writer_start.py), the SDK types conformance checks against, and what
# prober.commands.cli imports: a writer started by a `prober` command runs the command's main module again,
# as `__mp_main__`, which is then cheap. (Not prober.commands.cli itself: runpy warns when it runs a module
# already imported.)
PRELOAD = ("prober.run.sample_writer", "prober.store", "prober.targets.conformance", "anthropic.types",
           "openai.types.chat", "typer", "rich.console", "rich.table", "prober.commands.terminal",
           "prober.commands.store_access", "prober.run.store_access")

_server = multiprocessing.forkserver._forkserver
_started_here = False


def start_or_share() -> None:
    """Share the session's server if ENV names one, else start it as prober/run/sample_writer.py does
    (its preload runs in the background from here) and name it."""
    global _started_here
    if ENV in os.environ:
        share(os.environ[ENV])
        return
    # Imported here, not above: the zygote imports this module, and none of the project.
    from prober.run.sample_writer import start_fork_server

    multiprocessing.set_forkserver_preload(list(PRELOAD))
    start_fork_server()
    os.environ[ENV] = _server._forkserver_address
    _started_here = True


def share(address: str) -> None:
    _server._forkserver_address = address
    _server._forkserver_alive_fd = os.open(os.devnull, os.O_WRONLY)
    _server.ensure_running = resource_tracker.ensure_running
    multiprocessing.forkserver.ensure_running = resource_tracker.ensure_running


def wait_until_ready() -> None:
    """Return once the server has its modules imported (it forked a process that does nothing), so
    that no test runs beside the preload: a timing test would have it as load."""
    nothing = multiprocessing.get_context("forkserver").Process(target=int)
    nothing.start()
    nothing.join()


def stop(timeout: float = 10.0) -> None:
    """End the server this process started and wait for it, as a parent waits for its children:
    its CPU time and its writers' then count in this process's (time -v, the CPU totals of a test
    run). A writer a test never closed, still running after `timeout` s, is left, the server killed."""
    global _started_here
    if not _started_here:
        return
    _started_here = False
    pid = _server._forkserver_pid
    os.close(_server._forkserver_alive_fd)
    _server._forkserver_pid = _server._forkserver_alive_fd = None
    deadline = time.monotonic() + timeout
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return
        time.sleep(0.01)
