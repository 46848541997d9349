"""How busy the machine is with work that is not the benchmark's (Linux /proc; elsewhere unknown).

On 2 cores a test suite or a model server running beside the benchmark moves every figure, so each
phase records the CPU share that other processes used while it ran, and a level can wait for the
machine to go quiet before it starts.
"""

from __future__ import annotations

import os
import resource
import time
from typing import NamedTuple

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class CpuSnapshot(NamedTuple):
    total: int        # jiffies over all CPUs
    busy: int         # total less idle and iowait
    ours: int         # user + system jiffies of the benchmark's processes and their descendants


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _descendants(pids: list[int]) -> set[int]:
    """The processes and all their live descendants (a client may run helper processes)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat_fields(int(entry))) is not None:
            parents[int(entry)] = int(fields[1])
    found = set(pids)
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in found and pid not in found:
                found.add(pid)
                grew = True
    return found


def tree_ticks(pids: list[int]) -> int:
    """CPU jiffies (user + system) of the processes, their live descendants and their reaped
    children; 0 where /proc is missing."""
    total = 0
    try:
        tree = _descendants(pids)
    except OSError:
        return 0
    for pid in tree:
        fields = _stat_fields(pid)
        if fields is not None:
            total += sum(int(v) for v in fields[11:15])   # utime, stime, cutime, cstime
    return total


def snapshot(pids: list[int]) -> CpuSnapshot | None:
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            values = [int(v) for v in handle.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    total = sum(values)
    return CpuSnapshot(total, total - values[3] - values[4], tree_ticks(pids))


def ticks_to_seconds(ticks: int) -> float:
    return ticks / _TICK


def other_share(before: CpuSnapshot | None, after: CpuSnapshot | None) -> float | None:
    """The share of the machine's CPU capacity (all cores) that other processes used in between."""
    if before is None or after is None or after.total <= before.total:
        return None
    other = (after.busy - before.busy) - (after.ours - before.ours)
    return max(0.0, other / (after.total - before.total))


def wait_until_quiet(pids: list[int], threshold: float, max_wait: float, probe: float = 1.0) -> float | None:
    """Wait (at most `max_wait` s) for a `probe`-second window in which other processes use less
    than `threshold` of the CPU; returns the last window's share (None where /proc is missing)."""
    deadline = time.monotonic() + max_wait
    while True:
        before = snapshot(pids)
        time.sleep(probe)
        share = other_share(before, snapshot(pids))
        if share is None or share < threshold or time.monotonic() >= deadline:
            return share


def raise_fd_limit(needed: int = 0) -> int:
    """Raise this process's open-file limit to its hard limit (512 streams need 512 sockets on
    each side); returns the new soft limit. Exits with a message if even the hard limit is short."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise SystemExit(f"the open-file limit is {hard}; {needed} are needed (raise `ulimit -Hn`)")
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY:
        return soft
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft
