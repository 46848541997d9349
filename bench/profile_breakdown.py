"""Where prober's client spends its CPU: a py-spy recording grouped by process and prober component.

    python bench/profile_breakdown.py prober.raw [--ms-per-request 0.45] [--writer-ms-per-request 0.55]

Input is `py-spy record --gil --threads [--subprocesses] -f raw` output (one collapsed stack per
line, then its sample count). With `--gil` only the thread holding the GIL is sampled, so within a
process the shares add up to its Python CPU time, whichever thread spends it. With
`--subprocesses` the sample-writer process (a child of the client) is recorded too, and shown on
its own: it runs on the other core, so its CPU competes with the event loop only when the machine
has no core to spare. Each sample goes to the component of its innermost prober (or library)
frame; standard-library frames (asyncio, json, threading, ...) count for the code that called them,
and a stack with no such frame is the event loop's own work. The benchmark's own store checks
after each level (bench/prober_client.py reading the rows back) are shown apart and left out of
the per-request figures. Garbage collection has no frame of its own: it is charged to whatever
allocation triggered it; bench/gc_pauses.py measures it directly.
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

# (component, test on the frame's file path, test on the function name); first match wins.
_RULES: list[tuple[str, str, str]] = [
    ("conformance check (pydantic SDK types)", r"prober/targets/conformance\.py|(^|/)(pydantic|openai|anthropic)/", ""),
    ("store writer (rows, SQLAlchemy, sqlite3)", r"prober/store/|(^|/)(sqlalchemy|sqlite3)/", ""),
    ("sample hand-off (Sample, queue, pickling)",
     r"prober/run/sample_writer\.py|multiprocessing/(queues|reduction|connection)\.py", ""),
    ("SSE parsing", r"prober/targets/sse\.py", ""),
    ("JSON decoding of events", r"prober/targets/adapter\.py", r"parse_json|StreamDecoder\._decode"),
    ("stream decoder (OpenAI chunks -> Exchange)", r"prober/targets/(openai|anthropic)\.py", r"Decoder\."),
    ("transport (HTTP/1.1, pool, timers)", r"prober/targets/transport\.py", ""),
    ("adapter (request body, head, exchange bookkeeping)", r"prober/targets/", ""),
    ("session, probe, records",
     r"prober/run/(session|budget|retry|progress)\.py|prober/core/records\.py|prober/probes/", ""),
    ("loop-lag monitor", r"prober/run/looplag\.py", ""),
]
_FRAME = re.compile(r"^(?P<func>.*) \((?P<path>[^():]*)(:\d+)?\)$")
EVENT_LOOP = "asyncio event loop (select, callbacks, task steps)"
BOOKKEEPING = "bench bookkeeping (rows read back after the level; not per request)"
CLIENT, WRITER = "client process", "sample-writer process"
_PROCESSES = re.compile(r'(process \d+:"[^"]*";)+')   # py-spy --subprocesses: one frame per process


def component(frames: list[str]) -> str:
    for frame in reversed(frames):
        match = _FRAME.match(frame)
        if not match:
            continue
        path, func = match["path"], match["func"]
        for name, path_rule, func_rule in _RULES:
            if re.search(path_rule, path) and (not func_rule or re.search(func_rule, func)):
                return name
    return EVENT_LOOP


def thread_name(first: str) -> str:
    name = first.split(": ", 1)[-1] if ": " in first else first
    return re.sub(r"_?\d+$", "", name) or "?"


def _is_bookkeeping(frames: list[str]) -> bool:
    """A stack of the benchmark's own level bookkeeping: under ProberClient.run_level itself, not
    under the requests' tasks (those run in the session's loops and the probe), or the collection
    quiet_garbage_collector makes before a level."""
    if any(f.startswith("quiet_garbage_collector ") for f in frames):
        return True
    return any(f.startswith("ProberClient.run_level ") for f in frames) and not any(
        "prober/run/session.py" in f or "prober/probes/" in f for f in frames)


class Profile:
    """Samples per process (client, sample writer), and per component and thread within each."""

    def __init__(self) -> None:
        self.components: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.threads: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    def total(self, process: str) -> int:
        return sum(n for name, n in self.components[process].items() if name != BOOKKEEPING)


def breakdown(raw: str) -> Profile:
    """Samples per process, component and thread from py-spy raw output. The recorded process is
    the client; a process nested under it (py-spy --subprocesses) is its sample writer."""
    profile = Profile()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        processes = _PROCESSES.match(stack)      # a command line may hold ";" itself
        depth = processes.group(0).count('process ') if processes else 0
        frames = stack[processes.end() if processes else 0:].split(";")
        process = CLIENT if depth <= 1 else WRITER
        thread, frames = frames[0], frames[1:]
        n = int(count)
        profile.threads[process][thread_name(thread)] += n
        profile.components[process][BOOKKEEPING if _is_bookkeeping(frames) else component(frames)] += n
    return profile


def render(raw: str, ms_per_request: float | None = None, writer_ms_per_request: float | None = None) -> str:
    profile = breakdown(raw)
    lines = []
    for process, per_request in ((CLIENT, ms_per_request), (WRITER, writer_ms_per_request)):
        components, threads = profile.components[process], profile.threads[process]
        total = profile.total(process)
        if not total:
            continue
        all_samples = sum(threads.values())
        cost = f", {per_request:.3f} CPU ms/request" if per_request else ""
        lines.append(f"{process}{cost}: {total} samples of the thread holding the GIL; by thread: "
                     + ", ".join(f"{name} {100 * n / all_samples:.0f}%" for name, n in threads.most_common()))
        for name, n in components.most_common():
            if name == BOOKKEEPING:
                continue
            share = n / total
            ms = f"  ~{share * per_request:.3f} ms/request" if per_request else ""
            lines.append(f"  {100 * share:5.1f}%  {name}{ms}")
        if components[BOOKKEEPING]:
            lines.append(f"  (and {components[BOOKKEEPING]} samples of {BOOKKEEPING})")
    return "\n".join(lines) or "no samples"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw", type=Path)
    parser.add_argument("--ms-per-request", type=float, default=None,
                        help="the client process's CPU ms per request, to turn its shares into ms")
    parser.add_argument("--writer-ms-per-request", type=float, default=None,
                        help="the sample-writer process's CPU ms per request, likewise")
    args = parser.parse_args()
    print(render(args.raw.read_text(), args.ms_per_request, args.writer_ms_per_request))


if __name__ == "__main__":
    main()
