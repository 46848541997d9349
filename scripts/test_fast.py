"""`make test-fast`: the timing tests beside the rest, at a higher priority than the rest.

Usage: test_fast.py WORKERS MARKS [TIMING_FILE ...]

Two pytest runs, started together:
- the timing tests (`MARKS and timing`), one at a time, at the caller's priority, collecting only
  TIMING_FILE (the files that can hold one; with none given, all of them);
- every other test (`MARKS and not timing`) on WORKERS pytest-xdist workers, at niceness 19.

The timing tests mostly wait (for an emulator's delays, a schedule's next arrival): run alone
after the rest they used about a third of the two cores (some 45 CPU-seconds in 73 s on this
project's machine), and the whole took 217 s; beside it, 140 s. At niceness 19 the rest takes only
the CPU the timing tests leave. Measured on that machine (Linux 6.18): a 1 ms sleep woke 0.08 ms
late at p99 beside four busy processes at niceness 19 (0.13 ms with nothing running; 0.6 ms, and
13 ms at worst, beside four at normal priority), well inside the 5 ms margin each timing bound
carries (tests/support/timing.py), and each bound is a ratio against a reference measured in the
same test under the same conditions. Ten runs this way (five in one clone, then five fresh clones)
passed with no timing retry. Niceness orders processes within one session's scheduling group
(autogroup), which both runs share.

The rest's progress is printed as it runs; the timing tests' output, held meanwhile, after it.
The exit status is the first non-zero of the two runs'. Ctrl-C reaches both (they are in the
terminal's process group) and each stops as pytest does, stopping the servers its fixtures started.
"""

import os
import subprocess
import sys
import tempfile

BACKGROUND_NICENESS = 19


def _pytest(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]


def _lowest_priority() -> None:
    os.nice(BACKGROUND_NICENESS)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("usage: test_fast.py WORKERS MARKS [TIMING_FILE ...]", file=sys.stderr)
        return 2
    workers, marks, timing_files = argv[0], argv[1], argv[2:]
    with tempfile.TemporaryFile(mode="w+") as timing_output:
        timing = subprocess.Popen(_pytest("-m", f"({marks}) and timing", *timing_files),
                                  stdout=timing_output, stderr=subprocess.STDOUT)
        rest = subprocess.Popen(_pytest("-n", workers, "--dist", "worksteal", "-m", f"({marks}) and not timing"),
                                preexec_fn=_lowest_priority)
        try:
            rest_status = rest.wait()
            if timing.poll() is None:
                print("\nwaiting for the timing tests ...", flush=True)
            timing_status = timing.wait()
        except KeyboardInterrupt:
            # The children had the same SIGINT and are stopping: wait for their fixtures' teardown.
            rest.wait()
            timing.wait()
            rest_status = timing_status = 130
        timing_output.seek(0)
        print(f"\ntiming tests ({marks} and timing), run beside the above at normal priority:", flush=True)
        sys.stdout.write(timing_output.read())
    return rest_status or timing_status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
