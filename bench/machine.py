"""How busy the machine is with work that is not the benchmark's (Linux /proc; elsewhere unknown),
and how fast its CPU runs the same fixed work from one minute to the next.

On 2 cores a test suite or a model server running beside the benchmark moves every figure, so each
phase records the CPU share that other processes used while it ran, and a level can wait for the
machine to go quiet before it starts.

A virtual machine can also slow down with nothing of its own running: on the project's 2-core
machine a fixed loop of `json.loads` calls took 452-470 ms for minutes at a time, then 540-1,008 ms,
while every other process stayed at 0-3% of the CPU (2 December 2026). The host takes the time,
and no counter inside the guest shows it (/proc/stat's steal column stayed flat). `HostSpeed`
times a fixed workload between phases, and `WorkGauge` times a smaller one by its CPU time all
through each phase, so each phase says how fast the host ran it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import threading
import time
from collections.abc import Callable
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


_PROBE_TEXT = json.dumps({"id": "chatcmpl-probe", "choices": [{"index": 0, "delta": {"content": " word"}}],
                          "usage": None, "created": 1727346168})


# How far the host's speed may move within one level, by either gauge (HostSpeed's probe between
# phases, WorkGauge's mean through a phase): in the host's fast state the probe varies by about 4%
# and a busy phase's in-phase mean by up to 10% (a nearly idle phase reads 5-14% above the busiest);
# its slow spells are 15-120% slower.
STEADY_TOLERANCE = 0.15


def add_steady_arguments(parser: argparse.ArgumentParser, unit: str, rerun: str) -> None:
    """--wait-steady and --steady-retries, for a benchmark whose levels are `unit`s ("level",
    "rate") and whose reruns cover `rerun` (what the help says runs again)."""
    parser.add_argument("--wait-steady", type=float, default=60.0, metavar="SECONDS",
                        help=f"before each {unit}, wait up to this long for the host to run a fixed workload "
                             f"within {STEADY_TOLERANCE:.0%}% of the run's best time (default %(default)s; 0: "
                             "do not wait)")
    parser.add_argument("--steady-retries", type=int, default=2, metavar="N",
                        help=f"run {rerun} again, at most N times, when the host's speed changed by more than "
                             f"{STEADY_TOLERANCE:.0%}% between its phases; every rerun is printed (default "
                             "%(default)s)")


def check_steady_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.steady_retries < 0 or args.wait_steady < 0:
        parser.error("--steady-retries and --wait-steady cannot be negative")


# Held while either gauge runs its workload, so that neither times the other's.
_WORK_LOCK = threading.Lock()


class WorkGauge:
    """The host's speed all through a phase: a daemon thread in the driver times a fixed workload
    (1,000 `json.loads` calls, about 2.4 ms) every quarter second by the CPU time of its own thread,
    about 1% of one core, the same for every client.

    A thread's CPU time leaves out the time it waits for a core or for the GIL, so the benchmark's
    own load hardly moves it: on the 2-core machine 2,000 calls took 4.6-5.2 ms of CPU idle and
    4.6-5.2 ms while 512 streams kept both cores busy, when their wall time reached 10.9 ms (3
    December 2026). A host that runs slower makes the same work cost more CPU time, whenever in the
    phase that happens. That is what the probes between phases miss and what the loopback server's
    CPU per request cannot tell apart from the client's own load (see `HostSpeed.run_level`)."""

    LOOPS = 1_000
    PERIOD_S = 0.25

    def __init__(self) -> None:
        self._readings: list[tuple[float, float, float]] = []     # (monotonic end, CPU ms, wall ms)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="host-speed-gauge", daemon=True)

    def start(self) -> WorkGauge:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        loads = json.loads
        while not self._stop.wait(self.PERIOD_S):
            with _WORK_LOCK:
                wall, cpu = time.perf_counter(), time.thread_time()
                for _ in range(self.LOOPS):
                    loads(_PROBE_TEXT)
                cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
            self._readings.append((time.monotonic(), 1e3 * cpu, 1e3 * wall))

    def readings_since(self, since: float) -> list[tuple[float, float]]:
        """(CPU ms, wall ms) of each reading taken since `since` (monotonic s)."""
        return [(cpu, wall) for end, cpu, wall in list(self._readings) if end >= since]

    def mean_since(self, since: float) -> float | None:
        """The mean CPU time of the workload over the readings taken since `since` (monotonic s)."""
        readings = self.readings_since(since)
        return statistics.fmean(cpu for cpu, _ in readings) if readings else None


class HostSpeed:
    """Times a fixed single-threaded workload (about 30 ms on a fast host) from the driver process,
    between phases, while the benchmark's own processes are idle. The fastest time seen in the run
    is the host's normal speed; `slowdown(ms)` is a probe's time over it (1.0 = as fast as the
    run's best). The best of three repetitions makes one probe, so a single interruption does not
    count as a slow host.

    With a `WorkGauge`, each phase also records the gauge's mean through the phase
    (`host_inphase_ms`), judged against the lowest phase mean of the run (`best_inphase_ms`)."""

    LOOPS = 12_000

    def __init__(self, gauge: WorkGauge | None = None) -> None:
        self.best_ms = float("inf")
        self.gauge = gauge
        self.best_inphase_ms = float("inf")

    def probe(self) -> float:
        loads = json.loads
        times = []
        for _ in range(3):
            with _WORK_LOCK:
                started = time.perf_counter()
                for _ in range(self.LOOPS):
                    loads(_PROBE_TEXT)
                times.append(1e3 * (time.perf_counter() - started))
        ms = min(times)
        self.best_ms = min(self.best_ms, ms)
        return ms

    def slowdown(self, ms: float | None) -> float | None:
        return None if ms is None else ms / self.best_ms

    def inphase_since(self, since: float) -> float | None:
        """The in-phase gauge's mean since `since` (monotonic s); None without a gauge."""
        if self.gauge is None:
            return None
        ms = self.gauge.mean_since(since)
        if ms is not None:
            self.best_inphase_ms = min(self.best_inphase_ms, ms)
        return ms

    def inphase_slowdown(self, ms: float | None) -> float | None:
        return None if ms is None else ms / self.best_inphase_ms

    def wait_until_steady(self, tolerance: float, max_wait: float, pause: float = 2.0) -> float:
        """Probe until the host runs within `tolerance` of the run's best speed so far (at most
        `max_wait` s); returns the last probe's time in ms."""
        deadline = time.monotonic() + max_wait
        while True:
            ms = self.probe()
            if ms <= self.best_ms * (1 + tolerance) or time.monotonic() >= deadline:
                return ms
            time.sleep(pause)

    def run_level(self, run: Callable[[Callable[[dict], None]], list[dict]], label: str, *,
                  tolerance: float, retries: int, max_wait: float) -> tuple[list[dict], list[dict]]:
        """Run one level's phases on a host whose speed holds still: wait (up to `max_wait` s) for
        the run's best speed, then `run(stamp)`, which calls `stamp(result)` after each phase to
        probe the host (`host_before_ms`, `host_after_ms`) and read the in-phase gauge
        (`host_inphase_ms`). The level runs again, at most `retries` times, and every rerun is
        printed, when its probes differ by more than `tolerance` (the phases compared with each
        other ran on different hosts) or a phase's in-phase mean is more than `tolerance` above the
        run's lowest (the host slowed inside the phase). Returns (the phases kept, the phases
        discarded).

        Only the gauges decide, because only they are independent of the clients: the probes run
        while the benchmark's processes are idle, and the in-phase gauge counts CPU time, not wall
        time. A gauge read from the benchmark's own work (the loopback server's CPU per request,
        recorded as `server_cpu_us` for the reader) moves with the client's load as well: on the
        2-core machine, with the probes steady, the server spent 275-311 us a request under the
        reference and 344-402 under prober at 512 streams, as the cores' shared resources are
        busier. Rerunning on it would rerun prober's heavy phases more often than the reference's,
        in prober's favour."""
        discarded: list[dict] = []
        for attempt in range(retries + 1):
            latest = [self.wait_until_steady(tolerance, max_wait) if max_wait > 0 else self.probe()]
            first = latest[0]
            phase_started = [time.monotonic()]

            def stamp(result: dict, latest: list[float] = latest,
                      phase_started: list[float] = phase_started) -> None:
                result["host_inphase_ms"] = self.inphase_since(phase_started[0])
                result["host_before_ms"] = latest[0]
                latest[0] = self.probe()
                result["host_after_ms"] = latest[0]
                result["server_cpu_us"] = server_cpu_us(result)
                phase_started[0] = time.monotonic()

            phases = run(stamp)
            probes = [first] + [p["host_after_ms"] for p in phases]
            inphase = [p["host_inphase_ms"] for p in phases if p["host_inphase_ms"] is not None]
            slowest = max(inphase) / self.best_inphase_ms if inphase else 1.0
            if (max(probes) <= min(probes) * (1 + tolerance) and slowest <= 1 + tolerance) or attempt == retries:
                return phases, discarded
            print(f"{label}: the host's speed changed during the level (fixed-work probe between phases "
                  f"{min(probes):.0f}-{max(probes):.0f} ms; in-phase gauge up to {slowest:.2f}x the run's "
                  f"best; {tolerance:.0%} allowed): running it again ({attempt + 1} of {retries})",
                  file=sys.stderr, flush=True)
            discarded.extend(phases)
        raise AssertionError("unreachable: the last attempt returns")


def server_cpu_us(result: dict) -> float | None:
    """The loopback server's CPU time per request it served during the phase, from its stats."""
    stats = result.get("server") or {}
    if not stats.get("served") or stats.get("cpu_s") is None:
        return None
    return 1e6 * stats["cpu_s"] / stats["served"]


def mark_slowdowns(phases: list[dict], host: HostSpeed) -> None:
    """Each phase's `host_slowdown`, the larger of: its slower probe over the run's best probe, and
    its in-phase mean (where recorded) over the run's lowest."""
    for phase in phases:
        between = host.slowdown(max(phase["host_before_ms"], phase["host_after_ms"]))
        within = host.inphase_slowdown(phase.get("host_inphase_ms"))
        phase["host_slowdown"] = max(v for v in (between, within) if v is not None)


def host_notes(rows: list[dict], discarded: list[dict], tolerance: float, where: str = "printed above") -> list[str]:
    """What the reader of a table needs to know about the host's speed during the run."""
    notes = []
    if discarded:
        notes.append(f"{len(discarded)} phase(s) ran again because the host's speed changed during their "
                     f"level ({where})")
    slow = [r for r in rows if (r.get("host_slowdown") or 0) > 1 + tolerance]
    if slow:
        worst = max(r["host_slowdown"] for r in slow)
        notes.append(f"the host ran up to {worst:.2f}x slower than its best of the run during {len(slow)} of "
                     f"{len(rows)} rows (column 'host slowdown': a fixed workload timed before and after "
                     f"each phase, and another by its CPU time all through it, each over its fastest in "
                     f"the run): their absolute figures (req/s, CPU ms/request, lags) are the slowed "
                     f"host's, not the client's")
    return notes
