"""The event loop a run measures on: uvloop where it is installed, asyncio's own otherwise.

Every timestamp the client takes waits for the loop, so the loop's own cost per I/O event is part
of what prober adds to a measured latency. uvloop (libuv, in C) calls a protocol's data_received
straight from its poll and runs due timers before the callbacks other events queued.
bench/ttft_overhead.py at 512 streams, the two loops alternated in three pairs on one 2-core
machine: 0.94-1.03x the plain-asyncio reference's rate against 0.89-0.91x, event-loop lag p99
9.5-15 ms against 30-87 ms, TTFT overhead p99 0.13-0.40x the reference's against 0.89-1.53x
(bench/README.md).

`PROBER_EVENT_LOOP=asyncio` runs on asyncio's loop instead (to compare, or to rule the loop out
when something looks wrong); the loop a run used is stored with it (Run.notes["event_loop"]).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from prober.core.errors import ConfigError

T = TypeVar("T")
ENV = "PROBER_EVENT_LOOP"
CHOICES = ("uvloop", "asyncio")


def _choice() -> str:
    wanted = os.environ.get(ENV, "").strip().lower()
    if wanted and wanted not in CHOICES:
        raise ConfigError(f"${ENV} is {wanted!r}: use one of {', '.join(CHOICES)}")
    if wanted == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if wanted == "uvloop":
            raise ConfigError(f"${ENV} asks for uvloop, which is not installed (pip install uvloop)") from None
        return "asyncio"
    return "uvloop"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    if _choice() == "uvloop":
        import uvloop
        return uvloop.new_event_loop
    return asyncio.new_event_loop


def describe(loop: asyncio.AbstractEventLoop) -> str:
    """The running loop as stored with a run: "uvloop 0.23.0" or "asyncio"."""
    return _named("uvloop" if type(loop).__module__.split(".")[0] == "uvloop" else "asyncio")


def chosen() -> str:
    """What `run` would run on, named as `describe` names it."""
    return _named(_choice())


def _named(kind: str) -> str:
    if kind == "uvloop":
        from importlib.metadata import version
        return f"uvloop {version('uvloop')}"
    return "asyncio"


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on the chosen loop (a bad choice is a ConfigError, before `main` starts)."""
    try:
        factory = loop_factory()
    except ConfigError:
        main.close()
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
