"""SLO rules: matching, comparators, the `for` debouncing over stored runs, config errors, and
`prober run` exiting 1 when a rule fires."""

from __future__ import annotations

import textwrap

import pytest

from prober.alerting.alerts import evaluate_run
from prober.alerting.slo import SloCheck, rule_breaks, rule_matches
from prober.core.config import ProberConfig, SloRule, load_config
from prober.core.errors import ConfigError
from prober.store import Store
from tests.support.cli import prober
from tests.support.history import add_run


def rule(**fields) -> SloRule:
    return SloRule.model_validate({"name": "r", "metric": "ttft_p50_ms", "threshold": 800, **fields})


METRIC = {"name": "ttft_p50_ms", "target": "prod", "probe": "latency", "labels": {"concurrency": 16}, "value": 900.0}
RUN = {"id": "r1", "suite": "nightly"}


@pytest.mark.unit
def test_rule_matches_name_target_suite_or_probe_and_label_subset():
    assert rule_matches(rule(), METRIC, RUN)
    assert rule_matches(rule(labels={"concurrency": 16}, target="prod"), METRIC, RUN)
    assert rule_matches(rule(labels={"concurrency": "16"}), METRIC, RUN)            # TOML string vs int label
    assert rule_matches(rule(suite="latency"), METRIC, RUN)                          # the metric's probe
    assert rule_matches(rule(suite="nightly"), METRIC, RUN)                          # the run's suite
    assert not rule_matches(rule(suite="caching"), METRIC, RUN)
    assert not rule_matches(rule(labels={"concurrency": 32}), METRIC, RUN)
    assert not rule_matches(rule(labels={"prompt": "story"}), METRIC, RUN)            # label absent
    assert not rule_matches(rule(target="staging"), METRIC, RUN)
    assert not rule_matches(rule(metric="ttft_p99_ms"), METRIC, RUN)


@pytest.mark.parametrize("comparator, value, breaks", [
    ("<=", 800, False), ("<=", 800.1, True), ("<", 800, True), ("<", 799, False),
    (">=", 800, False), (">=", 799, True), (">", 800, True), (">", 801, False),
])
@pytest.mark.unit
def test_rule_states_the_healthy_condition_and_breaks_when_it_is_false(comparator, value, breaks):
    assert rule_breaks(rule(comparator=comparator), value) is breaks


@pytest.mark.unit
def test_a_missing_value_breaks_nothing():
    assert rule_breaks(rule(), None) is False


@pytest.mark.unit
def test_the_verdict_line_names_labels_as_key_value_and_leaves_out_the_ones_that_do_not_apply():
    # A penalty baseline's cell has penalty_value None (no penalty is applied): said as nothing, not "None".
    metric = {"name": "corruption_rate", "target": "emulator", "probe": "penalty", "value": 0.0,
              "labels": {"mode": "unconstrained", "penalty": "none", "penalty_value": None, "temperature": 0.0}}
    check = SloCheck(rule(metric="corruption_rate", threshold=0.05), metric, broken=False)
    assert check.summary == ("r: emulator corruption_rate (mode=unconstrained, penalty=none, temperature=0.0) "
                             "= 0 holds <= 0.05")
    assert rule_breaks(rule(), float("nan")) is False


def _states(store: Store, config: ProberConfig, values: list[float]) -> list[tuple[str, list[str]]]:
    """Evaluate one run per value; per run: the alert state and the events that run made."""
    seen = []
    for night, value in enumerate(values):
        run = add_run(store, f"run{night}", night, [{"name": "ttft_p50_ms", "value": value,
                                                     "labels": {"concurrency": 16}, "n": 32, "unit": "ms"}])
        evaluation = evaluate_run(store, config, run["id"])
        [alert] = store.alerts()
        seen.append((alert["state"], [e["status"] for e in store.alert_events() if e["run_id"] == run["id"]]))
        assert bool(evaluation.firing) is (alert["state"] == "firing")
    return seen


@pytest.mark.unit
def test_for_debouncing_fires_on_the_third_breaking_run_and_resolves_on_recovery(tmp_path):
    config = ProberConfig.model_validate({"slo": [{"name": "ttft16", "metric": "ttft_p50_ms", "threshold": 800,
                                                   "labels": {"concurrency": 16}, "for": 3, "severity": "critical"}],
                                          "drift": {"enabled": False}})
    with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        seen = _states(store, config, [500, 900, 950, 500, 900, 900, 1000, 1200, 700, 650])
    assert seen == [
        ("ok", []), ("pending", []), ("pending", []),
        ("ok", []),                                         # a good run resets the count
        ("pending", []), ("pending", []), ("firing", ["firing"]),   # third breaking run in a row
        ("firing", []),                                     # still firing: no second notification
        ("resolved", ["resolved"]), ("resolved", []),
    ]


@pytest.mark.unit
def test_for_one_fires_at_once_and_refires_after_resolving(tmp_path):
    config = ProberConfig.model_validate({"slo": [{"name": "ttft16", "metric": "ttft_p50_ms", "threshold": 800}],
                                          "drift": {"enabled": False}})
    with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        seen = _states(store, config, [900, 500, 900])
    assert seen == [("firing", ["firing"]), ("resolved", ["resolved"]), ("firing", ["firing"])]


@pytest.mark.unit
def test_a_flagged_metric_is_never_judged(tmp_path):
    # p99 of 32 requests: its interval is unbounded, so a rule on it neither breaks nor holds.
    config = ProberConfig.model_validate({"slo": [{"name": "p99", "metric": "ttft_p99_ms", "threshold": 800}],
                                          "drift": {"enabled": False}})
    row = {"name": "ttft_p99_ms", "labels": {"concurrency": 16}, "n": 32, "unit": "ms", "ci_low": 700.0}
    with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        flagged = add_run(store, "flagged", 0, [{**row, "value": 5000.0, "flags": ["interval_unbounded"]}])
        assert evaluate_run(store, config, flagged["id"]).checked == 0 and store.alerts() == []
        judged = add_run(store, "judged", 1, [{**row, "value": 5000.0, "ci_high": 6000.0, "n": 400}])
        assert evaluate_run(store, config, judged["id"]).firing


@pytest.mark.unit
def test_slo_config_from_toml_and_its_errors(tmp_path):
    path = tmp_path / "prober.toml"
    path.write_text(textwrap.dedent("""
        [[slo]]
        name = "ttft16"
        metric = "ttft_p50_ms"
        suite = "latency"
        labels = { concurrency = 16 }
        comparator = "<="
        threshold = 800
        for = 2
        severity = "critical"
    """))
    [loaded] = load_config(path).slo
    assert (loaded.for_runs, loaded.labels, loaded.severity, loaded.comparator) == (2, {"concurrency": 16},
                                                                                     "critical", "<=")
    for bad, message in [('comparator = "=="', r"slo\.0\.comparator"), ("for = 0", r"slo\.0\.for"),
                         ('severity = "page"', r"slo\.0\.severity"),
                         ("thresold = 1", r"slo\.0\.thresold: unknown key")]:
        path.write_text(f'[[slo]]\nname = "a"\nmetric = "m"\nthreshold = 1\n{bad}\n')
        with pytest.raises(ConfigError, match=message):
            load_config(path)
    path.write_text('[[slo]]\nname = "a"\nmetric = "m"\nthreshold = 1\n'
                    '[[slo]]\nname = "a"\nmetric = "n"\nthreshold = 2\n')
    with pytest.raises(ConfigError, match="names must be unique.*repeated: a"):
        load_config(path)


@pytest.mark.unit
def test_init_writes_a_rule_for_every_built_in_suite(tmp_path):
    done = prober("init", "--path", str(tmp_path / "prober.toml"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    config = load_config(tmp_path / "prober.toml")
    assert {r.suite for r in config.slo} >= {"latency", "divergence", "caching", "penalty", "schema_order"}
    assert config.sinks == []          # examples only, commented out: a fresh file must run without secrets
    text = (tmp_path / "prober.toml").read_text()
    assert all(f'# kind = "{kind}"' in text for kind in ("webhook", "slack", "alertmanager"))


@pytest.mark.emulator
@pytest.mark.timeout(300)
def test_prober_run_exits_1_when_an_slo_fires_and_0_when_it_holds(tmp_path):
    base = textwrap.dedent(f"""
        [store]
        url = "sqlite:///{tmp_path / 'p.db'}"
        [runner]
        progress = false
        [targets.emu]
        protocol = "anthropic"
        model = "emulator-1"
        emulator = {{ }}
    """)
    # 6 requests: the fewest whose median has a bounded interval (a flagged p50 is never judged).
    params = ["--param", "levels=[1]", "--param", "requests_per_level=6", "--param", "warmup=0",
              "--param", "max_tokens=8"]
    (tmp_path / "holds.toml").write_text(base + '[[slo]]\nname = "ttft"\nmetric = "ttft_p50_ms"\nthreshold = 60000\n')
    held = prober("run", "--suite", "latency", "-c", str(tmp_path / "holds.toml"), *params, cwd=tmp_path)
    assert held.returncode == 0, held.stdout + held.stderr
    assert "FIRING" not in held.stdout

    (tmp_path / "breaks.toml").write_text(base + '[[slo]]\nname = "ttft"\nmetric = "ttft_p50_ms"\nthreshold = 1\n'
                                                 'severity = "critical"\n')
    broke = prober("run", "--suite", "latency", "-c", str(tmp_path / "breaks.toml"), *params, cwd=tmp_path)
    assert broke.returncode == 1, broke.stdout + broke.stderr
    assert "FIRING [critical] ttft: emu ttft_p50_ms (concurrency=1)" in broke.stdout
