"""`prober baseline accept` end to end against the emulator, on SQLite and on PostgreSQL: a TTFT
regression pages once, accepting its level closes the open alert with a "new_normal" event and
re-baselines the metric (the next slow night does not page), `prober show` and the report name
the accept, revoking it is recorded, and bad input is one clear line."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from prober.store import Store
from tests.support.cli import assert_one_clear_line, prober
from tests.support.postgres import create_database

PARAMS = ["levels=[2]", "requests_per_level=16", "warmup=1", "max_tokens=8", "input_tokens=16"]
RUN_ID = re.compile(r"run id (\w+)")


@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.emulator),
                        pytest.param("postgresql", marks=pytest.mark.infra)])
def setup(request, tmp_path):
    """(config path, store url, scenario file) for target emu on the in-process emulator."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'p.db'}"
    else:
        url = create_database(request.getfixturevalue("postgres_url"), f"accept_{uuid.uuid4().hex[:12]}")
    scenario = tmp_path / "scenario.toml"
    config = tmp_path / "prober.toml"
    config.write_text(f'[store]\nurl = "{url}"\n\n[runner]\nprogress = false\n\n'
                      '[drift]\nbaseline_runs = 6\nmin_baseline_runs = 3\n\n'
                      '[targets.emu]\nprotocol = "openai"\nmodel = "emulator-1"\n'
                      f'emulator = {{ scenario = "{scenario}" }}\n')
    return config, url, scenario


def _night(config: Path, scenario: Path, ttft_ms: int) -> tuple[int, str, str]:
    """One latency run with the emulator's first token `ttft_ms` late: (exit code, run id, output)."""
    scenario.write_text(f"first_token_delay_ms = {ttft_ms}\nprefill_ms_per_token = 0\ndecode_tokens_per_s = 2000\n"
                        "slots = 64\n")
    params = [arg for param in PARAMS for arg in ("--param", param)]
    result = prober("run", "--suite", "latency", "--target", "emu", "--config", str(config), *params,
                    cwd=config.parent)
    found = RUN_ID.search(result.stdout + result.stderr)
    assert found, result.stdout + result.stderr
    return result.returncode, found.group(1), result.stdout + result.stderr


def _ttft_paged(output: str) -> bool:
    """The latency families page as one alert (drift_latency) that names each family that moved."""
    return any(line.startswith("FIRING [warning] drift: emu latency") and "drift: emu latency ttft_ms:" in line
               for line in output.splitlines())


def _about_ttft(alert: dict) -> bool:
    return alert["metric"] == "ttft_ms" or "ttft_ms" in ((alert.get("detail") or {}).get("members") or {})


@pytest.mark.timeout(900)
def test_accepting_a_regressed_level_closes_its_alert_and_rebaselines(setup):
    config, url, scenario = setup
    for _ in range(4):
        code, _, output = _night(config, scenario, 100)
        assert code == 0, output
    # TTFT x6: paged within two nights (on a busy machine the fast nights' TTFT spread is wider)
    slow_runs, outputs = [], []
    for _ in range(2):
        code, run_id, output = _night(config, scenario, 600)
        slow_runs.append(run_id)
        outputs.append(output)
        if _ttft_paged(output):
            break
    assert code == 1 and _ttft_paged(outputs[-1]), outputs
    store = Store.open(url)
    try:
        firing = [row for row in store.alerts(state="firing") if _about_ttft(row)]
        assert len(firing) == 1, store.alerts()
    finally:
        store.close()

    accepted = prober("baseline", "accept", "--target", "emu", "--metric", "ttft_ms", "--config", str(config),
                      cwd=config.parent)
    assert accepted.returncode == 0, accepted.stderr
    assert "accepted: emu ttft_ms normal since" in accepted.stdout, accepted.stdout
    # (the group's alert: closing it names each family that moved, ttft_ms among them)
    closed = [line for line in accepted.stdout.splitlines() if line.startswith("closed as the new normal: drift: emu")]
    assert len(closed) == 1 and "drift: emu latency ttft_ms:" in closed[0], accepted.stdout
    store = Store.open(url)
    try:
        assert not [row for row in store.alerts(state="firing") if _about_ttft(row)]
        events = store.alert_events(firing[0]["key"])
        assert [event["status"] for event in events] == ["firing", "new_normal"]
        accepts = store.baseline_accepts(target="emu")
        assert len(accepts) == 1 and accepts[0]["metric"] == "ttft_ms"
        # Accepted from the start of the drift: the slow nights open the new baseline.
        assert accepts[0]["since"] in [store.get_run(run_id)["started_at"] for run_id in slow_runs]
    finally:
        store.close()

    code, later_run, output = _night(config, scenario, 600)            # still slow: no page now
    assert "FIRING" not in output, output
    shown = prober("show", later_run, "--config", str(config), cwd=config.parent)
    assert shown.returncode == 0, shown.stderr
    assert "baseline accepted: emu ttft_ms normal since" in shown.stdout, shown.stdout
    report = prober("report", "--format", "md", "--out", str(config.parent / "out"), "--config", str(config),
                    cwd=config.parent)
    assert report.returncode == 0, report.stderr
    markdown = "".join(path.read_text() for path in (config.parent / "out").rglob("*.md"))
    assert "baseline accepted: emu ttft_ms normal since" in markdown.replace("\\_", "_"), markdown

    revoked = prober("baseline", "revoke", str(accepts[0]["id"]), "--config", str(config), cwd=config.parent)
    assert revoked.returncode == 0 and f"revoked accept {accepts[0]['id']}" in revoked.stdout, revoked.stderr
    listed = prober("baseline", "list", "--config", str(config), cwd=config.parent)
    assert "no baseline accepts in force" in listed.stdout, listed.stdout
    store = Store.open(url)
    try:
        kept = store.baseline_accepts(target="emu", in_force=False)
        assert len(kept) == 1 and kept[0]["revoked_at"] is not None       # revoked, still recorded
    finally:
        store.close()
    again = prober("baseline", "revoke", str(accepts[0]["id"]), "--config", str(config), cwd=config.parent)
    assert_one_clear_line(again, f"no accept {accepts[0]['id']} in force")


@pytest.mark.unit
@pytest.mark.parametrize(("args", "fragment"), [
    (("--target", "nope"), "--target 'nope': no such target"),
    (("--target", "emu", "--since", "someday"), "--since 'someday': expected a duration"),
])
def test_bad_accept_input_is_one_clear_line(tmp_path, args, fragment):
    config = tmp_path / "prober.toml"
    config.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "p.db"}"\n\n'
                      '[targets.emu]\nprotocol = "openai"\nmodel = "emulator-1"\nemulator = { }\n')
    assert_one_clear_line(prober("baseline", "accept", *args, "--config", str(config), cwd=tmp_path), fragment)
