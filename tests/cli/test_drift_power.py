"""`prober drift-power`: per latency family, the night-to-night spread of the stored baseline and
the smallest shift paged within two nights nine times in ten at the family's share of the budget;
bad input is one clear line."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from prober.alerting.drift import EACH_NIGHT_P
from prober.core import stats
from prober.store import Store
from tests.support.cli import assert_one_clear_line, prober
from tests.support.history import add_run

pytestmark = pytest.mark.unit

LINE = re.compile(r"latency ttft_ms: varies (\d+)% night to night here \((\d+) baseline runs\); a shift of "
                  r"\+(\d+)% or more pages within 2 nights")


def _config(tmp_path) -> str:
    config = tmp_path / "prober.toml"
    config.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "p.db"}"\n\n[drift]\nmin_effect = {{ latency = 0.0 }}\n\n'
                      '[targets.emu]\nprotocol = "openai"\nmodel = "emulator-1"\nemulator = { }\n')
    return str(config)


def test_drift_power_states_the_shift_the_two_night_test_detects(tmp_path):
    config = _config(tmp_path)
    logs = list(np.random.default_rng(4).normal(math.log(40), 0.12, 12))
    store = Store.open(f"sqlite:///{tmp_path / 'p.db'}")
    try:
        for night, value in enumerate(logs):
            add_run(store, f"r{night}", night, [{"name": "ttft_p50_ms", "value": math.exp(value), "n": 400,
                                                 "unit": "ms", "labels": {"concurrency": 1}}])
    finally:
        store.close()
    result = prober("drift-power", "--target", "emu", "--suite", "latency", "--config", config, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    found = LINE.search(result.stdout)
    assert found, result.stdout
    # The newest run is judged: its two-night test's baseline is the 10 runs before the previous one,
    # at the whole budget (one probe, one family, the two-night window the only one that pages):
    # 1 / 90, each of its nights beyond the baseline's 90th percentile.
    baseline = logs[:-2]
    expected = math.exp(stats.night_shift_detectable(baseline, 1 / 90, each_night_p=EACH_NIGHT_P)) - 1
    spread = stats.serial_baseline(baseline)[1] ** 0.5
    assert int(found.group(2)) == len(baseline)
    assert int(found.group(3)) == round(100 * expected), (result.stdout, expected)
    assert int(found.group(1)) == round(100 * spread), (result.stdout, spread)
    # `prober show` states the same next to the run's metrics.
    shown = prober("show", f"r{len(logs) - 1}", "--config", config, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"sensitivity: emu {found.group(0)}" in shown.stdout, shown.stdout


@pytest.mark.parametrize(("args", "fragment"), [
    (("--target", "nope"), "--target 'nope': no such target"),
    (("--target", "emu"), "--target 'emu': no complete run of suite 'nightly'"),
])
def test_bad_drift_power_input_is_one_clear_line(tmp_path, args, fragment):
    assert_one_clear_line(prober("drift-power", *args, "--config", _config(tmp_path), cwd=tmp_path), fragment)
