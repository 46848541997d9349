"""Where prober's client spends its CPU: a py-spy recording grouped by prober component.

    python bench/profile_breakdown.py prober.raw [--ms-per-request 1.05]

Input is `py-spy record --gil --threads -f raw` output (one collapsed stack per line, then its
sample count). With `--gil` only the thread holding the GIL is sampled, so the shares add up to
the process's Python CPU time, whichever thread spends it. Each sample goes to the component of
its innermost prober (or library) frame; standard-library frames (asyncio, json, threading, ...)
count for the code that called them, and a stack with no such frame is the event loop's own work.
Garbage collection has no frame of its own: it is charged to whatever allocation triggered it,
mostly JSON decoding; bench/gc_pauses.py measures it directly.
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

# (component, test on the frame's file path, test on the function name); first match wins.
_RULES: list[tuple[str, str, str]] = [
    ("conformance check (pydantic SDK types)", r"prober/targets/conformance\.py|(^|/)(pydantic|openai|anthropic)/", ""),
    ("store writer (rows, SQLAlchemy, sqlite3)", r"(^|/)(store|sqlalchemy|sqlite3)/", ""),
    ("sample writer hand-off", r"prober/sample_writer\.py", ""),
    ("SSE parsing", r"prober/targets/sse\.py", ""),
    ("JSON decoding of events", r"prober/targets/adapter\.py", r"parse_json|StreamDecoder\._decode"),
    ("stream decoder (OpenAI chunks -> Exchange)", r"prober/targets/(openai|anthropic)\.py", r"Decoder\."),
    ("adapter (request body, head, exchange bookkeeping)", r"prober/targets/", ""),
    ("transport (HTTP/1.1, pool, timers)", r"prober/transport\.py", ""),
    ("session, probe, records", r"prober/(session|records|budget|retry|progress)\.py|(^|/)probes/", ""),
    ("loop-lag monitor", r"prober/looplag\.py", ""),
]
_FRAME = re.compile(r"^(?P<func>.*) \((?P<path>[^():]*)(:\d+)?\)$")
EVENT_LOOP = "asyncio event loop (select, callbacks, task steps)"


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


def breakdown(raw: str) -> tuple[int, collections.Counter, collections.Counter]:
    """(samples, samples per component, samples per thread) from py-spy raw output."""
    by_component: collections.Counter = collections.Counter()
    by_thread: collections.Counter = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        n = int(count)
        total += n
        by_thread[thread_name(frames[0])] += n
        by_component[component(frames[1:])] += n
    return total, by_component, by_thread


def render(raw: str, ms_per_request: float | None = None) -> str:
    total, by_component, by_thread = breakdown(raw)
    if not total:
        return "no samples"
    lines = [f"{total} samples of the thread holding the GIL; by thread: "
             + ", ".join(f"{name} {100 * n / total:.0f}%" for name, n in by_thread.most_common())]
    for name, n in by_component.most_common():
        share = n / total
        cost = f"  ~{share * ms_per_request:.3f} ms/request" if ms_per_request else ""
        lines.append(f"  {100 * share:5.1f}%  {name}{cost}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw", type=Path)
    parser.add_argument("--ms-per-request", type=float, default=None,
                        help="the client's CPU ms per request, to turn shares into ms")
    args = parser.parse_args()
    print(render(args.raw.read_text(), args.ms_per_request))


if __name__ == "__main__":
    main()
