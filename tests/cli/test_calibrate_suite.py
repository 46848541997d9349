"""A suite's `[calibrate]` table: loaded with the suite, checked like its entries, and run by
`prober run` before the suite as a run of its own (issue 13, item 5: the nightly calibrates first)."""

import pytest

from prober.core.errors import ConfigError
from prober.probes.calibration import CalibrationParams
from prober.store import Store
from prober.suites.loader import load_suite
from tests.support.cli import prober

SUITE = """description = "calibrated latency"
include = ["latency"]
[calibrate]
concurrency = [2]
requests_per_level = 8
"""


@pytest.mark.unit
def test_the_nightly_suite_calibrates_first_with_a_short_table():
    nightly = load_suite("nightly", [])
    assert isinstance(nightly.calibrate, CalibrationParams)
    assert nightly.calibrate.concurrency == [1, 64] and nightly.calibrate.requests_per_level == 128
    assert load_suite("latency", []).calibrate is None


@pytest.mark.unit
@pytest.mark.parametrize("table, named", [
    ("[calibrate]\nconcurrency = [0]\n", "calibrate.concurrency"),
    ("[calibrate]\nlevels = [1]\n", "calibrate.levels: unknown key"),
    ("calibrate = 3\n", "calibrate: must be a table"),
])
def test_a_bad_calibrate_table_names_the_file_and_the_key(tmp_path, table, named):
    (tmp_path / "mine.toml").write_text(f'description = "x"\ninclude = ["latency"]\n{table}')
    with pytest.raises(ConfigError) as raised:
        load_suite("mine", [str(tmp_path)])
    assert str(tmp_path / "mine.toml") in str(raised.value) and named in str(raised.value)


@pytest.mark.emulator
def test_prober_run_stores_the_calibration_as_its_own_run_before_the_suite(tmp_path):
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "calibrated.toml").write_text(SUITE)
    config = tmp_path / "prober.toml"
    config.write_text(f'suite_paths = ["{suites}"]\n[store]\nurl = "sqlite:///{tmp_path}/p.db"\n'
                      '[runner]\nprogress = false\n'
                      '[targets.emu]\nprotocol = "openai"\nmodel = "emulator-1"\n[targets.emu.emulator]\n')
    result = prober("run", "--suite", "calibrated", "--config", str(config), "--param", "levels=[1]",
                    "--param", "requests_per_level=4", "--param", "warmup=0", cwd=tmp_path, timeout=300)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    store = Store.open(f"sqlite:///{tmp_path}/p.db")
    try:
        runs = sorted(store.list_runs(), key=lambda run: run["started_at"])
        assert [run["suite"] for run in runs] == ["calibrate", "calibrated"]
        calibration = runs[0]
        assert calibration["status"] == "complete" and calibration["sample_count"] == 8
        names = {m["name"] for m in store.metrics(calibration["id"])}
        assert {"ttft_overhead_p50_ms", "ttft_overhead_p99_ms", "itl_overhead_p50_ms"} <= names
    finally:
        store.close()
