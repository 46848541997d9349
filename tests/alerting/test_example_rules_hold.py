"""`prober init`'s example rules hold on the healthy emulator for every built-in suite (issue 32,
item 2): each suite runs twice with the config `prober init` writes (rules with `for = 2` fire on
the second breaking run, so one run would prove nothing) and must exit 0 both times.

The default grids take minutes per suite on a loaded machine, so `--param` shrinks each one while
keeping the label cells the example rules select: latency and divergence keep concurrency 16,
caching keeps the `repeat` case, penalty keeps the no-penalty baseline at temperature 0.0 and the
injection check (in the unconstrained mode: prober init's emulator speaks the Anthropic protocol,
which has no json_object), schema_order keeps its two variants on the first items of its dataset.
Every example rule of the suite must be judged (none "no data") and hold. A shrunken
grid judged by a rule says the rule holds on that cell; it is the same cell the default grid has."""

from __future__ import annotations

import pytest

from prober.core.config import load_config
from tests.support.cli import prober

pytestmark = pytest.mark.emulator

SHRUNK = {
    "latency": ["levels=[1, 16]", "requests_per_level=16", "warmup=0"],
    "divergence": ["levels=[1, 16]", "requests_per_level=16", "reference_requests=4", "max_tokens=64"],
    "caching": ['cases=["repeat"]', "requests=8"],
    # unconstrained: prober init's emulator speaks the Anthropic protocol, which has no json_object
    # (baseline_repeats stays at 4: fewer leaves the injection check without a value)
    "penalty": ['modes=["unconstrained"]', "n_records=[10]", "temperatures=[0.0]", "repeats=2"],
    "schema_order": ["limit=24"],
}


def test_every_suite_is_shrunk_and_every_example_rule_is_exercised(tmp_path):
    done = prober("init", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rules = load_config(tmp_path / "prober.toml").slo
    assert {rule.suite for rule in rules} <= set(SHRUNK)
    from prober.suites.loader import available_suites

    assert set(SHRUNK) == set(available_suites([])) - {"nightly"}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("suite", sorted(SHRUNK))
def test_the_example_rules_hold_twice_on_the_healthy_emulator(tmp_path, suite):
    assert prober("init", cwd=tmp_path).returncode == 0
    params = [arg for value in SHRUNK[suite] for arg in ("--param", value)]
    for attempt in (1, 2):
        done = prober("run", "--suite", suite, "--target", "emulator", "--summary", *params, cwd=tmp_path,
                      timeout=800)
        assert done.returncode == 0, f"run {attempt} of {suite}: {done.stdout}\n{done.stderr[-3000:]}"
        [verdict] = done.stdout.splitlines()
        # The shrunken grid still has the cells the suite's rules select: each rule is judged, and holds.
        rules = [rule for rule in load_config(tmp_path / "prober.toml").slo if rule.suite == suite]
        assert verdict == f"emulator: SLOs: {len(rules)} held, 0 broken, 0 no data", verdict
