"""SLO rules checked and reported: a metric no probe produces is refused at load (exit 2, with the
nearest names), a rule that matched nothing is counted as no data, and every target gets a line."""

from __future__ import annotations

import pytest

from prober.alerting.alerts import Observation, judge
from prober.alerting.slo_rules import check_rules_known, rule_states, slo_line, target_lines
from prober.core.config import SloRule
from prober.core.errors import ConfigError
from prober.core.probe_registry import all_metric_names, get_probe
from prober.probes.base import MetricCollector
from tests.support.cli import prober

pytestmark = pytest.mark.unit


def rule(**fields) -> SloRule:
    return SloRule.model_validate({"name": "r", "metric": "ttft_p50_ms", "threshold": 800, **fields})


RUN = {"id": "r1", "suite": "latency"}


def metric(value, concurrency=16, target="prod", name="ttft_p50_ms"):
    return {"name": name, "target": target, "probe": "latency", "labels": {"concurrency": concurrency},
            "value": value}


def test_a_typo_in_a_rule_exits_2_at_load_naming_the_rule_and_the_nearest_metrics(tmp_path):
    config = tmp_path / "prober.toml"
    config.write_text(f'[store]\nurl = "sqlite:///{tmp_path}/p.db"\n'
                      '[[slo]]\nname = "fast_first_token"\nmetric = "ttft_p50_msx"\nthreshold = 800\n')
    done = prober("run", "--suite", "latency", "--target", "emulator", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 2
    line = " ".join(done.stderr.split())
    assert "slo rule 'fast_first_token': no probe produces metric 'ttft_p50_msx'" in line
    assert "did you mean ttft_p50_ms" in line
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "p.db").exists()   # refused before anything was opened or sent


def test_known_metrics_pass_and_unknown_ones_without_a_near_name_get_no_guess():
    check_rules_known([rule(), rule(name="lag", metric="client_loop_lag_p99_ms"), rule(name="hits", metric="hit_rate")],
                      "prober.toml")
    with pytest.raises(ConfigError) as raised:
        check_rules_known([rule(name="odd", metric="zzzz")], "prober.toml")
    assert str(raised.value) == "prober.toml: slo rule 'odd': no probe produces metric 'zzzz'"


def test_rule_states_count_held_broken_and_no_data_per_target():
    rules = [rule(name="held"), rule(name="broken", threshold=100), rule(name="at_17", labels={"concurrency": 17}),
             rule(name="no_value", metric="ttft_p99_ms"),
             rule(name="other_target", target="staging"), rule(name="other_suite", suite="caching"),
             rule(name="not_this_probe", metric="hit_rate")]
    rows = [metric(500.0), metric(None, name="ttft_p99_ms"), metric(50.0, target="staging")]
    states = {s.rule.name: s for s in rule_states(rules, RUN, "prod", ["latency"], rows)}
    # Rules for another target, another suite, or a metric this run's probes cannot produce do not apply.
    assert set(states) == {"held", "broken", "at_17", "no_value"}
    assert {name: s.state for name, s in states.items()} == {
        "held": "held", "broken": "broken", "at_17": "no data", "no_value": "no data"}
    assert states["at_17"].matched == 0 and states["no_value"].matched == 1
    assert slo_line("prod", list(states.values())) == "prod: SLOs: 1 held, 1 broken, 2 no data"


def test_every_probe_declares_the_metrics_it_can_produce():
    names = all_metric_names()
    assert names is not None
    for probe in ("caching", "divergence", "latency", "penalty", "schema_order"):
        assert get_probe(probe).metric_names, probe
    collector = MetricCollector(run_id="r", target="t", probe="latency")
    collector.add("ttft_p50_ms", 1.0, {})
    with pytest.raises(ValueError, match="does not declare"):
        collector.add("ttft_p51_ms", 1.0, {})


def test_the_last_line_names_what_is_pending_and_what_fires():
    """A broken rule with `for = 2` exits 0 on its first breaking run: the target's line says why."""
    import datetime as dt

    def observe(name: str, for_runs: int, target: str = "prod") -> Observation:
        return Observation(key=name, kind="slo", name=name, severity="warning", target=target, suite="latency",
                           probe="latency", metric="ttft_p50_ms", labels={}, value=900.0, broken=True,
                           for_runs=for_runs, summary=f"{name} broken")

    now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    _, _, evaluation = judge([observe("slow", 2), observe("down", 1), observe("elsewhere", 3, "staging")], {},
                             "run1", now)
    rules = [rule(name="held"), rule(name="slow", threshold=100)]
    states = {"prod": rule_states(rules, RUN, "prod", ["latency"], [metric(500.0)])}
    lines = target_lines({"prod": ("complete", None), "gone": ("failed", "connection refused")}, states,
                         evaluation.firing, evaluation.pending)
    assert lines == ["prod: SLOs: 1 held, 1 broken, 0 no data; 1 firing; "
                     "pending: slow fires after 2 consecutive runs (1 so far)",
                     "gone: failed (connection refused); SLOs not checked"]
