"""`prober calibrate` end to end: the emulator in its own process, the runner's client, the
overheads stored as a run of suite `calibrate` (issue 13, item 5)."""

import sys
import threading

import pytest

from prober.commands.calibrate import SUITE, TARGET, calibrate, calibration_params
from prober.core.config import ProberConfig
from prober.store import Store
from tests.support.cli import prober

pytestmark = pytest.mark.emulator

FIRST_TOKEN_MS = 100.0


def _overheads(db_url: str) -> tuple[dict, dict[tuple, float]]:
    store = Store.open(db_url)
    try:
        (run,) = store.list_runs(suite=SUITE)
        metrics = {(m["name"], tuple(sorted(m["labels"].items()))): m["value"]
                   for m in store.metrics(run["id"], target=TARGET)}
    finally:
        store.close()
    return run, metrics


def test_calibrate_stores_small_non_negative_overheads_per_level(tmp_path):
    db_url = f"sqlite:///{tmp_path}/p.db"
    result = prober("calibrate", "--db", db_url, "--concurrency", "1,8", "--rates", "40", "--requests", "24",
                    cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ttft_overhead_p50_ms" in result.stdout
    run, metrics = _overheads(db_url)
    assert run["status"] == "complete" and run["sample_count"] == 3 * 24
    for level in ((("concurrency", 1),), (("concurrency", 8),), (("rate_rps", 40.0),)):
        ttft = metrics[("ttft_overhead_p50_ms", level)]
        # The client's TTFT holds the emulator's and a loopback round trip: never less, and a
        # small part of the 100 ms the emulator waited (a loaded 2-core machine included).
        assert 0 <= ttft < 0.2 * FIRST_TOKEN_MS, (level, ttft)
        assert metrics[("ttft_overhead_p99_ms", level)] >= ttft
        assert abs(metrics[("itl_overhead_p50_ms", level)]) < 0.5 * 10.0, level   # of the 10 ms gap
        assert metrics[("error_rate", level)] == 0


def _spin(stop: threading.Event) -> None:
    count = 0
    while not stop.is_set():
        count += 1


def _calibrated_p50(tmp_path, name: str, hog: bool) -> float:
    db_url = f"sqlite:///{tmp_path}/{name}.db"
    config = ProberConfig.model_validate({"store": {"url": db_url}, "runner": {"progress": False}})
    params = calibration_params("16", None, {"requests_per_level": 64})
    stop = threading.Event()
    hogs = [threading.Thread(target=_spin, args=(stop,), daemon=True) for _ in range(2 if hog else 0)]
    switch_interval = sys.getswitchinterval()
    if hog:
        # A busy thread keeps the GIL until the interpreter makes it switch: at 20 ms slices each
        # wake-up of the event loop waits up to that long, whatever else loads the machine.
        sys.setswitchinterval(0.020)
    for thread in hogs:
        thread.start()
    try:
        calibration = calibrate(config, _quiet_console(), params)
    finally:
        stop.set()
        for thread in hogs:
            thread.join()
        sys.setswitchinterval(switch_interval)
    assert calibration.run.status == "complete"
    (p50,) = [m.value for m in calibration.metrics if m.name == "ttft_overhead_p50_ms"]
    assert p50 is not None
    return p50


def _quiet_console():
    from rich.console import Console

    return Console(stderr=True, quiet=True)


def test_a_starved_client_shows_a_larger_overhead(tmp_path):
    # Two busy Python threads in the client's process hold the GIL in 20 ms slices: every wake-up
    # of the event loop then waits for one (10 ms on average), which the calibration must see.
    quiet = _calibrated_p50(tmp_path, "quiet", hog=False)
    starved = _calibrated_p50(tmp_path, "starved", hog=True)
    assert starved > quiet + 5.0, (quiet, starved)


@pytest.mark.parametrize("args, named", [
    (("--concurrency", "1,x"), "--concurrency '1,x'"),
    (("--concurrency", "0"), "concurrency"),
    (("--rates", "-5"), "rates"),
    (("--target", "nope"), "unknown target 'nope'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, named):
    result = prober("calibrate", "--db", f"sqlite:///{tmp_path}/p.db", *args, cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert named in line
