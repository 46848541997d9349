"""The benchmarks' host-speed guard (bench/machine.py, HostSpeed and WorkGauge): a level whose phases
ran on a host that changed speed, between its phases or inside one, runs again, visibly and a
bounded number of times, and a level waits for the host to run at the run's best speed before it
starts. The gauges' timings are scripted here, except in the test that the in-phase gauge reads CPU
time, which the benchmark's own load does not move; the real probes run in every benchmark run."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.timing import timing_sensitive

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import machine

pytestmark = pytest.mark.unit


class ScriptedGauge:
    """An in-phase gauge whose mean through each phase is scripted, one per phase."""

    def __init__(self, means_ms: list[float]) -> None:
        self.means = list(means_ms)

    def mean_since(self, since: float) -> float | None:
        return self.means.pop(0)


class ScriptedHost(machine.HostSpeed):
    """A HostSpeed whose fixed workload takes the scripted times, one per probe."""

    def __init__(self, times_ms: list[float], inphase_ms: list[float] | None = None) -> None:
        super().__init__(ScriptedGauge(inphase_ms) if inphase_ms is not None else None)
        self.times = list(times_ms)
        self.probes = 0

    def probe(self) -> float:
        ms = self.times.pop(0)
        self.probes += 1
        self.best_ms = min(self.best_ms, ms)
        return ms


def phases_of(clients: list[str], server_cpu_s: list[float] | None = None):
    """A level runner with one phase per client, counting how often the level ran; with
    `server_cpu_s`, each phase's server stats say it served 1,000 requests in that CPU time."""
    runs: list[int] = []
    cpu = list(server_cpu_s or [])

    def run(stamp) -> list[dict]:
        runs.append(1)
        done = []
        for client in clients:
            result = {"client": client, "attempt": len(runs)}
            if cpu:
                result["server"] = {"served": 1000, "cpu_s": cpu.pop(0)}
            stamp(result)
            done.append(result)
        return done

    return run, runs


def test_a_level_on_a_steady_host_runs_once_and_records_each_phase_probes(capsys) -> None:
    host = ScriptedHost([100.0, 104.0, 101.0])      # the level's start, then one probe after each phase
    run, runs = phases_of(["reference", "prober"])
    kept, dropped = host.run_level(run, "c=512", tolerance=0.15, retries=2, max_wait=0)
    assert len(runs) == 1 and dropped == []
    assert [(p["host_before_ms"], p["host_after_ms"]) for p in kept] == [(100.0, 104.0), (104.0, 101.0)]
    assert capsys.readouterr().err == ""


def test_a_level_whose_host_slowed_between_its_phases_runs_again_and_says_so(capsys) -> None:
    # First attempt: the host slows from 100 to 190 ms after the reference's phase; the second is steady.
    host = ScriptedHost([100.0, 102.0, 190.0, 101.0, 103.0, 100.0])
    run, runs = phases_of(["reference", "prober"])
    kept, dropped = host.run_level(run, "pass 2/3  c=512", tolerance=0.15, retries=2, max_wait=0)
    assert len(runs) == 2
    assert [p["attempt"] for p in kept] == [2, 2] and [p["attempt"] for p in dropped] == [1, 1]
    err = capsys.readouterr().err
    assert "pass 2/3  c=512: the host's speed changed during the level" in err
    assert "100-190 ms" in err and "(1 of 2)" in err


def test_the_servers_cpu_per_request_is_recorded_but_never_decides_a_rerun(capsys) -> None:
    # It moves with the client's own load too (see HostSpeed.run_level): a rerun on it would favour
    # the heavier client. The probes are steady here, so the level runs once.
    host = ScriptedHost([100.0] * 3)
    run, runs = phases_of(["reference", "prober"], server_cpu_s=[0.275, 0.55])
    kept, dropped = host.run_level(run, "c=512", tolerance=0.15, retries=2, max_wait=0)
    assert len(runs) == 1 and dropped == []
    assert [round(p["server_cpu_us"]) for p in kept] == [275, 550]
    machine.mark_slowdowns(kept, host)
    assert [p["host_slowdown"] for p in kept] == [1.0, 1.0]
    assert capsys.readouterr().err == ""


def test_reruns_are_bounded_and_the_last_attempt_is_kept_as_measured(capsys) -> None:
    host = ScriptedHost([100.0, 200.0] * 3)        # every attempt unsteady
    run, runs = phases_of(["prober"])
    kept, dropped = host.run_level(run, "c=256", tolerance=0.15, retries=2, max_wait=0)
    assert len(runs) == 3 and len(dropped) == 2
    assert kept[0]["attempt"] == 3
    machine.mark_slowdowns(kept, host)
    assert kept[0]["host_slowdown"] == 2.0
    assert capsys.readouterr().err.count("running it again") == 2


def test_a_level_waits_for_the_host_to_return_to_its_best_speed(monkeypatch) -> None:
    monkeypatch.setattr(machine.time, "sleep", lambda seconds: None)
    host = ScriptedHost([100.0, 180.0, 175.0, 110.0, 108.0])
    host.probe()                                    # the run's first probe: best 100 ms
    run, runs = phases_of(["prober"])
    kept, _ = host.run_level(run, "c=64", tolerance=0.15, retries=0, max_wait=60)
    assert len(runs) == 1
    assert host.probes == 5                         # 180 and 175 waited, 110 started the level
    assert kept[0]["host_before_ms"] == 110.0


def test_the_wait_for_a_steady_host_gives_up_at_its_limit(monkeypatch) -> None:
    clock = iter(range(0, 1000, 10))                # each look at the clock: 10 s later
    monkeypatch.setattr(machine.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(machine.time, "sleep", lambda seconds: None)
    host = ScriptedHost([100.0] + [190.0] * 20)
    host.probe()
    assert host.wait_until_steady(0.15, max_wait=30) == 190.0
    assert host.probes <= 5


def test_notes_name_the_reruns_and_the_rows_a_slow_host_measured() -> None:
    rows = [{"host_slowdown": 1.02}, {"host_slowdown": 1.9}, {"host_slowdown": None}]
    notes = machine.host_notes(rows, [{}, {}], 0.15, "printed above")
    assert notes[0].startswith("2 phase(s) ran again")
    assert "up to 1.90x slower" in notes[1] and "during 1 of 3 rows" in notes[1]
    assert machine.host_notes([{"host_slowdown": 1.1}], [], 0.15) == []


def test_a_level_whose_host_slowed_inside_a_phase_runs_again_though_the_probes_between_were_steady(capsys) -> None:
    # The probes before and after each phase read 100 ms; inside the prober's phase of the first
    # attempt the host ran slow for a while, so that phase's in-phase mean is 1.3x the run's lowest.
    host = ScriptedHost([100.0] * 6, inphase_ms=[2.50, 3.25, 2.55, 2.52])
    run, runs = phases_of(["reference", "prober"])
    kept, dropped = host.run_level(run, "pass 2/3  c=512", tolerance=0.15, retries=2, max_wait=0)
    assert len(runs) == 2 and [p["attempt"] for p in kept] == [2, 2]
    assert [p["host_inphase_ms"] for p in dropped] == [2.50, 3.25]
    err = capsys.readouterr().err
    assert "in-phase gauge up to 1.30x the run's best" in err and "(1 of 2)" in err
    machine.mark_slowdowns(kept + dropped, host)
    assert [round(p["host_slowdown"], 2) for p in dropped] == [1.0, 1.3]    # the larger of the two gauges


def test_an_in_phase_mean_within_the_tolerance_does_not_rerun(capsys) -> None:
    host = ScriptedHost([100.0] * 3, inphase_ms=[2.50, 2.80])               # 1.12x: within 15%
    run, runs = phases_of(["reference", "prober"])
    host.run_level(run, "c=256", tolerance=0.15, retries=2, max_wait=0)
    assert len(runs) == 1 and capsys.readouterr().err == ""


_SPIN = "import time\nend = time.monotonic() + 4.0\nwhile time.monotonic() < end:\n    pass\n"


class LongGauge(machine.WorkGauge):
    """The gauge with a workload longer than a scheduler's time slice (about 100 ms), so that busy
    cores do stretch its wall time; the benchmarks' short one is often run whole on waking."""

    LOOPS = 40_000
    PERIOD_S = 0.02


@timing_sensitive
def test_the_in_phase_gauge_reads_cpu_time_which_a_busy_machine_hardly_moves() -> None:
    # Hogs take every core for a while: the wall time of the gauge's workload stretches, its CPU
    # time does not. The idle windows before and after are the reference, in the same run.
    gauge = LongGauge().start()
    try:
        time.sleep(1.0)
        idle = gauge.readings_since(0.0)
        hogs = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(2 * (os.cpu_count() or 1))]
        time.sleep(0.5)                                 # the hogs are up
        busy_started = time.monotonic()
        time.sleep(2.0)
        busy = gauge.readings_since(busy_started)
        for hog in hogs:
            hog.wait()
        idle_started = time.monotonic()
        time.sleep(1.0)
        idle += gauge.readings_since(idle_started)
    finally:
        gauge.stop()

    assert len(idle) >= 6 and len(busy) >= 3
    idle_cpu, busy_cpu = statistics.median(c for c, _ in idle), statistics.median(c for c, _ in busy)
    busy_wall = statistics.median(w for _, w in busy)
    assert busy_wall > 1.5 * idle_cpu, f"the hogs did not take the cores ({busy_wall:.0f} ms wall): nothing shown"
    assert busy_cpu < 1.3 * idle_cpu, f"CPU time {busy_cpu:.0f} ms with the cores busy, {idle_cpu:.0f} ms idle"
