"""The verdict table end to end against the emulator, in `prober status` (its table, --json and its
exit code), the Markdown report and the HTML site: five targets, one in each state.

- ok: the emulator as it is, every night: healthy.
- slow: the same emulator, with an SLO rule it cannot hold (TTFT p50 <= 1 ms): SLO broken.
- drifty: the emulator whose first-token delay is five times longer on the ninth and tenth
  nights, after eight nights of baseline: drifting (the latency drift test pages on a regression
  that lasts two nights).
- down: a port nobody listens on: failed, since its first run.
- never: configured, never run: no data.

The drift's minimum effect is a doubling of the median: a loaded machine moves the healthy
targets' TTFT by tens of percent from night to night, never by that much.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.cli import prober

pytestmark = pytest.mark.emulator

BASE = "first_token_delay_ms = 200\nprefill_ms_per_token = 0\ndecode_tokens_per_s = 400\n"
DRIFTED = BASE.replace("first_token_delay_ms = 200", "first_token_delay_ms = 1000")
PARAMS = ["--param", "levels=[4]", "--param", "requests_per_level=16", "--param", "warmup=1",
          "--param", "max_tokens=4", "--param", "input_tokens=16"]
BASELINE_NIGHTS = 8
RAN = ["ok", "slow", "drifty", "down"]
EXPECTED = {"down": "failed", "slow": "SLO broken", "drifty": "drifting", "never": "no data", "ok": "healthy"}


def _config(tmp_path: Path) -> Path:
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "drifty.toml").write_text(BASE)
    targets = "".join(f'[targets.{name}]\nprotocol = "openai"\nmodel = "emulator-1"\n'
                      f'emulator = {{ scenario = "{tmp_path / scenario}" }}\n'
                      for name, scenario in (("ok", "base.toml"), ("slow", "base.toml"), ("drifty", "drifty.toml"),
                                             ("never", "base.toml")))
    path = tmp_path / "prober.toml"
    path.write_text(
        f'[store]\nurl = "sqlite:///{tmp_path / "prober.db"}"\n[runner]\nprogress = false\n'
        f'{targets}'
        '[targets.down]\nprotocol = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:9"\n'
        '[[slo]]\nname = "slow-ttft"\nmetric = "ttft_p50_ms"\ntarget = "slow"\nthreshold = 1\n'
        f'[drift]\nbaseline_runs = {BASELINE_NIGHTS}\nmin_baseline_runs = {BASELINE_NIGHTS - 1}\n'
        'min_effect = { latency = 1.0 }\n')
    return path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("verdicts")
    config = _config(tmp_path)
    targets = [arg for name in RAN for arg in ("--target", name)]
    for night in range(BASELINE_NIGHTS + 2):
        if night == BASELINE_NIGHTS:
            (tmp_path / "drifty.toml").write_text(DRIFTED)
        done = prober("run", "--suite", "latency", *targets, *PARAMS, "--config", str(config), cwd=tmp_path)
        assert done.returncode in (1, 3), done.stderr[-2000:]        # slow breaks, down fails every night
    return tmp_path


def test_status_prints_every_state_and_exits_1(fleet: Path) -> None:
    done = prober("status", "--json", "--config", str(fleet / "prober.toml"), cwd=fleet)
    assert done.returncode == 1, done.stderr
    rows = json.loads(done.stdout)
    assert {row["target"]: row["state"] for row in rows} == EXPECTED
    assert [row["state"] for row in rows] == ["failed", "SLO broken", "drifting", "no data", "healthy"]  # worst first
    by_target = {row["target"]: row for row in rows}
    assert by_target["slow"]["metric"].startswith("ttft_p50_ms") and "healthy when <= 1" in by_target["slow"]["change"]
    # the drift test's own words: the median tonight against the baseline's, and its p-value
    # (the latency families page as one alert: the row names those that moved)
    moved = set(by_target["drifty"]["metric"].split("+"))
    assert moved and moved <= {"ttft_ms", "e2e_ms", "itl_ms"} and "baseline" in by_target["drifty"]["change"]
    assert by_target["drifty"]["samples"].startswith(f"prober samples {by_target['drifty']['run_id']} --target drifty")
    # down failed on every night: since the first run; drifting since the run that paged, the
    # tenth night (the second of the two slow ones)
    first_run = min(row["since"] for row in rows if row["since"])
    assert by_target["down"]["since"] == first_run
    drifty = by_target["drifty"]
    assert drifty["since"] > first_run and drifty["since_run"] == drifty["run_id"]
    assert by_target["never"]["since_run"] == "" and by_target["never"]["run_id"] == ""

    table = prober("status", "--config", str(fleet / "prober.toml"), cwd=fleet, env={"COLUMNS": "80"})
    assert table.returncode == 1
    lines = table.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    for target, state in EXPECTED.items():
        assert any(target in line and state.split()[0] in line for line in lines), (target, table.stdout)
    assert any(line.startswith("drifty") and "prober samples" in line for line in lines)

    healthy = prober("status", "--target", "ok", "--config", str(fleet / "prober.toml"), cwd=fleet)
    assert healthy.returncode == 0, healthy.stdout


def test_reports_open_with_the_verdict_table(fleet: Path) -> None:
    config = str(fleet / "prober.toml")
    md = prober("report", "--format", "md", "--out", str(fleet / "md"), "--config", config, cwd=fleet)
    assert md.returncode == 0, md.stderr
    text = Path(md.stdout.strip()).read_text(encoding="utf-8")
    verdict_lines = [line for line in text.splitlines() if line.startswith("| ") and "**" in line]
    assert [re.search(r"\*\*(.+?)\*\*", line).group(1) for line in verdict_lines[:5]] == list(EXPECTED.values())
    assert text.index("| target | site | state |") < text.index("Generated") < text.index("## ")
    assert "`prober samples " in verdict_lines[1]

    html = prober("report", "--out", str(fleet / "site"), "--config", config, cwd=fleet)
    assert html.returncode == 0, html.stderr
    page = (fleet / "site" / "latest.html").read_text(encoding="utf-8")
    body = page[page.index("<body>"):]
    assert body.index('<table class="verdicts"') < body.index("<h1>")
    states = re.findall(r'<td class="state">([^<]+)</td>', body)
    assert states == list(EXPECTED.values())
    link = re.search(r'<a href="(runs/[^"#]+)#[^"]+">run ', body)
    assert link is not None and (fleet / "site" / link.group(1)).exists()
    index = (fleet / "site" / "index.html").read_text(encoding="utf-8")
    assert index.index('<table class="verdicts"') < index.index("<h1>")
