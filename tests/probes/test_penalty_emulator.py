"""The emulator's penalty model, and the penalty suite end to end against it, checked against the
emulator's own ground truth."""

import pytest

from prober.core.errors import ConfigError
from prober.emulator import Scenario, load_scenario
from prober.emulator.behaviours import Pipeline, ServerState, base_behaviours
from prober.emulator.penalty import Penalties, key_variants
from prober.emulator.plan import GenRequest, PromptBlock
from prober.probes.penalty import FIELD_NAMES, OPTIONAL_FIELDS, records_prompt, records_schema
from prober.probes.penalty_analysis import analyse_records
from tests.support.emulated import run_suite_on_emulator

pytestmark = pytest.mark.emulator

PIPELINE = Pipeline(base_behaviours(Scenario()))


def _plan(n, mode="unconstrained", seq=0, temperature=0.2, pipeline=PIPELINE, prompt=None, **penalties):
    body = {"temperature": temperature, **penalties}
    if mode == "json_object":
        body["response_format"] = {"type": "json_object"}
    elif mode == "json_schema":
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "r", "schema": records_schema()}}
    request = GenRequest(protocol="openai", request_id=f"r{seq}", model="m", stream=True, max_tokens=None,
                         blocks=[PromptBlock("messages", prompt or records_prompt(n), role="user")], body=body)
    return pipeline.plan(request, ServerState(seq=seq, in_flight=0, active=0, queued=0))


def _analyses(n, mode="unconstrained", requests=24, **penalties):
    plans = [_plan(n, mode, seq, **penalties) for seq in range(requests)]
    return [analyse_records(p.text, n, FIELD_NAMES, OPTIONAL_FIELDS, p.finish, mode) for p in plans], plans


def _rate(results, attribute):
    return sum(bool(getattr(r, attribute)) for r in results) / len(results)


def test_scenario_table_and_errors(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("[penalty]\nkey_margin = 2.5\ninject_when_omitted = { frequency_penalty = 0.4 }\n")
    settings = load_scenario(path).penalty
    assert settings.key_margin == 2.5 and settings.inject_when_omitted == {"frequency_penalty": 0.4}
    assert Scenario().penalty.inject_when_omitted == {}          # the gateway switch is off by default
    path.write_text("[penalty]\nkey_margn = 2\n")
    with pytest.raises(ConfigError, match="penalty.key_margn"):
        load_scenario(path)


def test_penalty_arithmetic_and_key_renames():
    assert Penalties(frequency=0.5).apply(10.0, 4) == 8.0
    assert Penalties(presence=1.5).apply(10.0, 4) == 8.5 and Penalties(presence=1.5).apply(10.0, 0) == 10.0
    assert Penalties(repetition=1.25).apply(10.0, 1) == 8.0 and Penalties(repetition=1.25).apply(-4.0, 1) == -5.0
    assert key_variants("user_id") == ["user_id", "userId", "userld"]


def test_other_requests_are_left_alone():
    story = _plan(0, prompt="Write a short story about a lighthouse.", frequency_penalty=1.0)
    off = Pipeline(base_behaviours(Scenario.model_validate({"penalty": {"enabled": False}})))
    assert story.text == _plan(0, prompt="Write a short story about a lighthouse.", pipeline=off).text
    assert "penalty" not in story.truth
    assert "penalty" not in _plan(10, pipeline=off).truth


def test_no_penalty_no_corruption_at_temperature_zero():
    for mode in ("unconstrained", "json_object", "json_schema"):
        for n in (3, 40):
            results, plans = _analyses(n, mode, requests=2, temperature=0.0)
            assert all(r.parses and not r.corrupted and r.records_delivered == n for r in results), mode
            assert plans[0].text == plans[1].text


def test_corruption_rises_with_the_penalty_and_with_length():
    by_penalty = [_rate(_analyses(10, frequency_penalty=value)[0], "corrupted") for value in (0.0, 0.3, 1.0)]
    assert by_penalty[0] < by_penalty[1] <= by_penalty[2] and by_penalty[2] == 1, by_penalty
    by_length = [_rate(_analyses(n, repetition_penalty=1.1)[0], "corrupted") for n in (3, 10)]
    assert by_length[0] < by_length[1], by_length
    deep = _analyses(40, frequency_penalty=0.3)[0]
    # An additive penalty needs a few records before it outweighs the margin: the first corruption
    # falls after record 0, and key renames and single quotes show up.
    assert min(r.first_corruption_index for r in deep) >= 1
    assert _rate(deep, "key_drift") > 0.5 and _rate(deep, "quote_substitution") > 0.5


def test_constrained_output_always_parses_and_stops_early_instead():
    baseline, _ = _analyses(20, "json_schema", requests=12)
    strong, plans = _analyses(20, "json_schema", requests=12, frequency_penalty=1.0)
    assert _rate(baseline, "parses") == _rate(strong, "parses") == 1
    assert _rate(strong, "key_drift") == _rate(strong, "quote_substitution") == 0
    assert _rate(baseline, "premature_stop") == 0 and _rate(strong, "premature_stop") == 1
    assert max(r.records_delivered for r in strong) < 5
    for result, plan in zip(strong, plans):
        assert result.records_delivered == plan.truth["penalty"]["records_closed"]
        assert plan.truth["penalty"]["ended"] == "array_closed"
    dropped, _ = _analyses(20, "json_schema", requests=12, presence_penalty=1.5)
    assert _rate(dropped, "parses") == 1 and _rate(dropped, "dropped_optional") > 0.5


# --- end to end: the suite through the runner against `prober emulate` ---------------------------

FAST = "first_token_delay_ms = 1\nprefill_ms_per_token = 0\ndecode_tokens_per_s = 20000\n"


def _run(tmp_path, scenario, protocol, overrides):
    return run_suite_on_emulator(tmp_path, scenario, protocol, "penalty", overrides)


def _metric(metrics, name, **labels):
    found = [m for m in metrics if m["name"] == name and all(m["labels"].get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


GRID = {"modes": ["unconstrained", "json_schema"], "n_records": [20], "temperatures": [0.0],
        "penalties": {"frequency_penalty": [0.3, 1.0]}, "repeats": 2, "baseline_repeats": 3}


@pytest.mark.parametrize("gateway", [False, True])
def test_suite_measures_what_the_emulator_did_and_the_injection_check(tmp_path, gateway):
    scenario = FAST + ("[penalty]\ninject_when_omitted = { frequency_penalty = 0.5 }\n" if gateway else "")
    rows, metrics, truth = _run(tmp_path, scenario, "openai", GRID)
    assert len(rows) == 2 * (3 + 3 + 2 * 2) and all(r["error_type"] is None for r in rows)
    for row in rows:
        record = truth[row["request_id"]]["behaviours"]["penalty"]
        omitted = row["labels"]["penalty"] == "omitted"
        assert ("frequency_penalty" in row["request_body"]) == (not omitted)
        assert bool(record["injected"]) == (gateway and omitted)
        assert record["ended"] != "length"           # the default max_tokens fits 20 records
        result = analyse_records(row["output_text"], 20, FIELD_NAMES, OPTIONAL_FIELDS, row["finish_reason"],
                                 row["labels"]["mode"])
        assert result.records_delivered == record["records_closed"]
    for mode in ("unconstrained", "json_schema"):
        check = _metric(metrics, "penalties_applied_when_omitted", mode=mode)
        assert check["value"] == int(gateway), (mode, check)
        base = _metric(metrics, "corruption_rate", mode=mode, penalty="none")
        strong = _metric(metrics, "corruption_rate", mode=mode, penalty="frequency_penalty", penalty_value=1.0)
        assert base["value"] == 0 and strong["value"] == 1 and base["ci_high"] < 1
        effect = _metric(metrics, "penalty_effect", mode=mode, penalty="frequency_penalty", penalty_value=1.0)
        assert effect["value"] == 1 and effect["ci_low"] > 0
        assert _metric(metrics, "penalty_effect_p", mode=mode, penalty="frequency_penalty",
                       penalty_value=1.0)["value"] == pytest.approx(0.1)     # 0/3 against 2/2, exact
        assert _metric(metrics, "penalty_ignored", mode=mode, penalty="frequency_penalty")["value"] == 0
    schema = dict(mode="json_schema", penalty="frequency_penalty", penalty_value=1.0)
    assert _metric(metrics, "parse_rate", **schema)["value"] == 1
    assert _metric(metrics, "premature_stop_rate", **schema)["value"] == 1
    assert _metric(metrics, "records_delivered", **schema)["value"] < \
        _metric(metrics, "records_delivered", mode="json_schema", penalty="none")["value"] == 20
    assert _metric(metrics, "penalty_unsupported", penalty="frequency_penalty")["value"] == 0


def test_anthropic_structured_mode_is_a_forced_tool_and_penalties_are_refused(tmp_path):
    stored, metrics, _ = _run(tmp_path, FAST, "anthropic", {
        "modes": ["json_object", "json_schema"], "n_records": [12], "temperatures": [0.0],
        "penalties": {"frequency_penalty": [1.0]}, "repeats": 2, "baseline_repeats": 2})
    # The refused attempt is stored too (an attempt on the wire), before the resend that answered.
    refused = [r for r in stored if not r["final"]]
    assert refused and all(r["http_status"] == 400 and r["findings"][0].startswith("parameter ") for r in refused)
    rows = [r for r in stored if r["final"]]
    assert {r["labels"]["mode"] for r in rows} == {"tool"}
    assert all(r["request_body"]["tool_choice"] == {"type": "tool", "name": "save_records"} for r in rows)
    assert all(r["tool_calls"] and r["tool_calls"][0]["name"] == "save_records" for r in rows)
    assert _metric(metrics, "skipped", mode="json_object")["value"] == 1
    # The hosted API refuses penalty fields with a 400: recorded, and the baselines still run.
    carrying = [r for r in rows if r["labels"]["penalty"] != "omitted"]
    assert all("frequency_penalty" in r["rejected_params"] and "frequency_penalty" not in r["request_body"]
               for r in carrying)
    assert _metric(metrics, "penalty_unsupported", penalty="frequency_penalty")["value"] == 1
    assert _metric(metrics, "penalty_unsupported", penalty="presence_penalty")["value"] == 1
    assert not [m for m in metrics if m["name"] == "penalty_ignored"]      # refused, not ignored
    for penalty in ("none", "omitted", "frequency_penalty"):
        assert _metric(metrics, "parse_rate", mode="tool", penalty=penalty)["value"] == 1
        assert _metric(metrics, "records_delivered", mode="tool", penalty=penalty)["value"] == 12
    assert _metric(metrics, "penalties_applied_when_omitted", mode="tool")["value"] is None   # 2 + 2: too few
