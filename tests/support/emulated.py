"""Run `prober emulate` as its own process, the way a user rehearses against it, and read its
ground truth over HTTP."""

from __future__ import annotations

import json
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from tests.support.cli import BackgroundProber
from tests.support.llama import free_port
from tests.support.processes import listening


@contextmanager
def emulator_process(tmp_path: Path, scenario: str = ""):
    """Yield the base URL of an emulator serving `scenario` (TOML text) on a free port."""
    scenario_file = tmp_path / f"scenario-{time.monotonic_ns()}.toml"
    scenario_file.write_text(scenario)
    port = free_port()
    # Forked by the prober zygote (tests/support/cli.py): a process of its own, as `prober emulate`
    # would be, without a fresh interpreter's imports (0.4 s of CPU, several dozen times a tier).
    process = BackgroundProber("emulate", "--port", str(port), "--scenario", str(scenario_file), cwd=tmp_path,
                               stderr_path=scenario_file.with_suffix(".stderr"))
    with listening(process, port, "emulator", timeout=20):
        yield f"http://127.0.0.1:{port}"


def ground_truth(base_url: str) -> dict[str, dict]:
    """Request id -> the emulator's own record of that request."""
    with urllib.request.urlopen(f"{base_url}/_emulator/ground_truth", timeout=10) as response:
        data = json.load(response)
    records = data["requests"] if isinstance(data, dict) else data
    return {r["request_id"]: r for r in records}


def run_suite_on_emulator(tmp_path: Path, scenario: str, protocol: str, suite: str, overrides: dict,
                          target: dict | None = None) -> tuple[list[dict], list[dict], dict[str, dict]]:
    """Run `suite` through the Runner against `prober emulate` serving `scenario` (`target`: more
    keys for the target's config, e.g. pricing); return the run's stored samples, its stored
    metrics and the emulator's ground truth."""
    from prober.core.config import ProberConfig
    from prober.run.runner import Runner
    from prober.store import Store

    with emulator_process(tmp_path, scenario) as base_url:
        config = ProberConfig.model_validate({
            "store": {"url": f"sqlite:///{tmp_path}/prober.db"},
            "runner": {"progress": False},
            "targets": {"emu": {"protocol": protocol, "base_url": base_url, "model": "emulator-1",
                                **(target or {})}},
        })
        result = Runner(config).run(suite, ["emu"], overrides)
        truth = ground_truth(base_url)
    assert result.exit_code == 0, result.problems
    store = Store.open(f"sqlite:///{tmp_path}/prober.db")
    try:
        return store.samples(result.run_id), store.metrics(result.run_id), truth
    finally:
        store.close()
