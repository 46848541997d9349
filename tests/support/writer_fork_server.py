"""The sample writer's fork server, started once per test process with more preloaded.

A `prober run` starts its sample writer from multiprocessing's fork server (prober/sample_writer.py),
which imports the writer's modules once per process: once per run in production. The tests start
about a hundred writers, most of them in a run with conformance on, where each writer also imported
an SDK's types when its first sample arrived (the Anthropic SDK's about 1.2 s of CPU, OpenAI's
0.5 s). So each test process (a pytest worker, the prober zygote) starts the server itself, early,
from the environment it started with (a test's monkeypatched one would stay with the server), with
the SDK types preloaded too: a writer then starts in milliseconds. It imports only standard-library
modules, so that the zygote, which imports none of the project, can use it.

What a writer started here does not share with its run: the environment (the writer reads none;
the store URL and the secrets come with its arguments) and stderr, where a crashing writer would
print its traceback (the run still reports the writer's death: SampleStorageError).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import signal
import time
from multiprocessing import resource_tracker

# The writer's modules (prober.sample_writer.WRITER_MODULES, checked by
# tests/runner/test_sample_writer_handoff.py), the SDK types conformance checks against, and the
# CLI: a writer started by a `prober` command imports the command's main module again, as
# `__mp_main__`, which is then cheap.
PRELOAD = ("prober.sample_writer", "store", "prober.targets.conformance", "anthropic.types",
           "openai.types.chat", "prober.cli")


def start() -> None:
    """Start this process's fork server with PRELOAD (it imports them in the background), with
    SIGTERM blocked as prober/sample_writer.py starts it, and with /dev/null for its stdout: the
    zygote's stdout is its protocol."""
    multiprocessing.set_forkserver_preload(list(PRELOAD))
    resource_tracker.ensure_running()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    null = os.open(os.devnull, os.O_WRONLY)
    stdout = os.dup(1)
    try:
        os.dup2(null, 1)
        multiprocessing.forkserver.ensure_running()
    finally:
        os.dup2(stdout, 1)
        os.close(stdout)
        os.close(null)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def share_with_forked_children() -> None:
    """In a child forked (os.fork) from a process that ran `start`: use the parent's server.
    multiprocessing checks that its server still runs with waitpid, which only the server's parent
    may call (elsewhere it raises ChildProcessError); the parent keeps the server running while it
    runs (the server ends when every holder of its alive pipe has), so here only the resource
    tracker, shared the same way, needs checking."""
    multiprocessing.forkserver._forkserver.ensure_running = resource_tracker.ensure_running
    multiprocessing.forkserver.ensure_running = resource_tracker.ensure_running


def stop(timeout: float = 10.0) -> None:
    """End this process's fork server and wait for it, as a parent waits for its children: its CPU
    time and its writers' then count in this process's (time -v, the CPU totals of a test run).
    It ends once no process holds its alive pipe: a writer a test never closed still would, and is
    left, with the server killed, after `timeout` seconds."""
    server = multiprocessing.forkserver._forkserver
    pid = server._forkserver_pid
    if pid is None:
        return
    os.close(server._forkserver_alive_fd)
    server._forkserver_pid = server._forkserver_alive_fd = None
    deadline = time.monotonic() + timeout
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return
        time.sleep(0.01)
