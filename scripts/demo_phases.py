"""Run `make demo`'s phases one after another and print what each cost: wall time, CPU seconds, peak memory.

Usage: python3 scripts/demo_phases.py [--server-state FILE] [--json FILE] "NAME[:CODES]=COMMAND" ...

Each argument is one phase: its name, optionally the exit codes that count as success (default 0;
`run:0,1=...` because `prober run` exits 1 when an alert fires, and the demo still reports then),
and a shell command. A phase that exits otherwise stops the demo with its exit code, after the
table of the phases so far.

CPU seconds are user + system time, which load on a shared machine hardly moves, unlike the wall
time. A phase's own processes are counted through os.wait4 (the shell and every process it waited
for). llama-server is not among them: `prober local start` runs it in a session of its own so that
it outlives the command, so its CPU is read from /proc at each phase boundary, through the PID in
the state file `prober local start` writes, and added to the phase it was spent in.

Standard library only: the first phase creates the virtual environment this script cannot need.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Phase:
    name: str
    ok_codes: tuple[int, ...]
    command: str


@dataclass
class Cost:
    name: str
    wall_s: float
    cpu_s: float          # the phase's processes and llama-server's share, user + system
    server_cpu_s: float   # of which llama-server
    peak_mb: float        # the largest resident set among the phase's own processes
    exit_code: int


def parse_phase(spec: str) -> Phase:
    """'run:0,1=prober run ...' -> Phase('run', (0, 1), 'prober run ...')."""
    head, sep, command = spec.partition("=")
    if not sep or not head or not command.strip():
        raise ValueError(f"a phase is NAME[:CODES]=COMMAND, not {spec!r}")
    name, _, codes = head.partition(":")
    try:
        ok_codes = tuple(int(code) for code in codes.split(",")) if codes else (0,)
    except ValueError:
        raise ValueError(f"exit codes are comma-separated integers, not {codes!r}") from None
    return Phase(name.strip(), ok_codes, command)


def server_cpu_seconds(state_file: Path | None) -> float:
    """CPU seconds llama-server has used so far (0 when none runs): utime + stime of /proc/PID/stat."""
    if state_file is None:
        return 0.0
    try:
        pid = int(json.loads(state_file.read_text())["pid"])
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, KeyError, IndexError):
        return 0.0
    # After the ')' that ends the command name: state is field 3, utime 14 and stime 15 (proc(5)).
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class Interruption:
    """A Ctrl-C or SIGTERM, wherever it lands: before, during or after a phase's fork.

    The handler only records the signal and stops the running phase's whole process group. Raising
    from the handler (the default for SIGINT) could land between Popen's fork and the assignment of
    its result, and leave the phase's processes running and holding our output pipes.
    """

    def __init__(self) -> None:
        self.requested = False
        self.child: subprocess.Popen[bytes] | None = None

    def handle(self, signum: int, frame: object) -> None:
        self.requested = True
        self.stop_child()

    def stop_child(self) -> None:
        if self.child is not None:
            try:
                os.killpg(self.child.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt


INTERRUPTION = Interruption()


def run_phase(phase: Phase, state_file: Path | None) -> Cost:
    INTERRUPTION.check()
    print(f"== {phase.name}: {phase.command}", file=sys.stderr, flush=True)
    server_before = server_cpu_seconds(state_file)
    started = time.monotonic()
    # A process group of its own, so that an interruption stops the shell and everything it started
    # (a grandchild left running would keep the pipes of whoever reads this demo's output open).
    child = subprocess.Popen(["/bin/sh", "-c", phase.command], process_group=0)
    INTERRUPTION.child = child
    if INTERRUPTION.requested:       # signalled while forking: the handler had no child to stop yet
        INTERRUPTION.stop_child()
    _, status, usage = os.wait4(child.pid, 0)
    INTERRUPTION.child = None
    INTERRUPTION.check()
    wall = time.monotonic() - started
    server = max(0.0, server_cpu_seconds(state_file) - server_before)
    # ru_maxrss is in kilobytes on Linux.
    return Cost(phase.name, wall, usage.ru_utime + usage.ru_stime + server, server, usage.ru_maxrss / 1024,
                os.waitstatus_to_exitcode(status))


def table(costs: list[Cost], total: bool = True) -> str:
    lines = [f"{'phase':<14} {'wall s':>8} {'CPU s':>8} {'llama-server CPU s':>19} {'peak MB':>8}"]
    for cost in costs:
        lines.append(f"{cost.name:<14} {cost.wall_s:>8.1f} {cost.cpu_s:>8.1f} {cost.server_cpu_s:>19.1f} "
                     f"{cost.peak_mb:>8.0f}")
    if not total:
        return "\n".join(lines)
    lines.append(f"{'total':<14} {sum(c.wall_s for c in costs):>8.1f} {sum(c.cpu_s for c in costs):>8.1f} "
                 f"{sum(c.server_cpu_s for c in costs):>19.1f} {max((c.peak_mb for c in costs), default=0):>8.0f}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server-state", type=Path, help="the state file of `prober local start` "
                        "(its llama-server's PID)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("phases", nargs="+", metavar="NAME[:CODES]=COMMAND")
    args = parser.parse_args(argv)
    try:
        phases = [parse_phase(spec) for spec in args.phases]
    except ValueError as bad:
        print(f"error: {bad}", file=sys.stderr)
        return 2
    costs: list[Cost] = []
    failed = 0
    # An interrupted demo (Ctrl-C, a timeout's SIGTERM) still prints the phases it finished.
    previous = {signum: signal.signal(signum, INTERRUPTION.handle) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        for phase in phases:
            costs.append(run_phase(phase, args.server_state))
            print(f"== {phase.name} done:\n{table(costs[-1:], total=False)}", file=sys.stderr, flush=True)
            if costs[-1].exit_code not in phase.ok_codes:
                failed = costs[-1].exit_code or 1
                print(f"error: phase {phase.name} exited with code {costs[-1].exit_code}", file=sys.stderr)
                break
    except KeyboardInterrupt:
        print("error: interrupted; the phases finished so far:", file=sys.stderr)
        failed = 130
    finally:
        for signum, handler in previous.items():   # main() also runs inside the tests' own process
            signal.signal(signum, handler)
    load = os.getloadavg()
    print(f"\nmake demo, per phase ({os.cpu_count()} cores; load average {load[0]:.1f} {load[1]:.1f} "
          f"{load[2]:.1f} at the end; CPU s = user + system):")
    print(table(costs), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"load_average": load, "phases": [asdict(c) for c in costs]}, indent=2))
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
