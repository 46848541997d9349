"""The penalty probe's parameters, requests, checks and summary, on canned sample rows."""

import json

import pytest
from pydantic import ValidationError

from prober.core import stats
from prober.core.config import TargetConfig
from prober.core.probe_registry import get_probe
from prober.probes.penalty import (
    Cell,
    PenaltyParams,
    build_request,
    grid,
    ignored_check,
    injection_check,
    interleaved,
    records_prompt,
)
from prober.store.rows import output_fields
from prober.suites.loader import load_suite
from prober.targets.anthropic import AnthropicAdapter
from prober.targets.openai import OpenAIAdapter

pytestmark = pytest.mark.unit

PROBE = get_probe("penalty")


def _body(protocol, cell, params=None):
    target = TargetConfig(protocol=protocol, base_url="http://127.0.0.1:9", model="m", name="t")
    adapter = (OpenAIAdapter if protocol == "openai" else AnthropicAdapter)(target, "http://127.0.0.1:9", None)
    body, _ = adapter.build_body(build_request(cell, params or PenaltyParams(), protocol))
    return body


def test_params_defaults_validation_and_suite_files():
    params = PenaltyParams()
    assert params.n_records == [10, 40, 100] and params.temperatures == [0.0, 0.2]
    assert params.penalties == {"frequency_penalty": [0.3, 1.0], "presence_penalty": [0.5, 1.5],
                                "repetition_penalty": [1.1, 1.3]}
    for bad, fragment in [({"penalties": {"top_k": [1]}}, "unknown penalty 'top_k'"),
                          ({"n_records": [0]}, "positive integers"), ({"modes": ["yaml"]}, "modes"),
                          ({"baseline_repeats": 1}, "baseline_repeats"), ({"repeat": 2}, "repeat")]:
        with pytest.raises(ValidationError, match=fragment):
            PenaltyParams(**bad)
    (entry,) = load_suite("penalty", []).entries
    assert entry.probe.name == "penalty" and entry.params == PenaltyParams()
    assert "penalty" in [e.probe.name for e in load_suite("nightly", []).entries]


def test_grid_baselines_one_penalty_at_a_time_interleaved():
    params = PenaltyParams(modes=["json_schema"], n_records=[10], temperatures=[0.0], repeats=2, baseline_repeats=3)
    cells = grid(params, "openai")
    assert [(c.penalty, c.penalty_value, r) for c, r in cells] == [
        ("none", None, 3), ("omitted", None, 3), ("frequency_penalty", 0.3, 2), ("frequency_penalty", 1.0, 2),
        ("presence_penalty", 0.5, 2), ("presence_penalty", 1.5, 2), ("repetition_penalty", 1.1, 2),
        ("repetition_penalty", 1.3, 2)]
    order = interleaved(cells)
    assert len(order) == 3 + 3 + 6 * 2 and order[:8] == [c for c, _ in cells]   # round 1 visits every cell
    assert order[-2:] == [cells[0][0], cells[1][0]]                             # round 3: baselines only
    anthropic = grid(PenaltyParams(), "anthropic")
    assert {c.mode for c, _ in anthropic} == {"unconstrained", "tool"}


def test_requests_on_the_wire():
    cell = Cell("json_schema", 10, 0.2, "repetition_penalty", 1.3)
    body = _body("openai", cell)
    assert body["temperature"] == 0.2 and body["seed"] == 1234 and body["max_tokens"] == 64 + 64 * 10
    assert (body["frequency_penalty"], body["presence_penalty"]) == (0.0, 0.0)
    assert body["repetition_penalty"] == body["repeat_penalty"] == 1.3
    assert body["response_format"]["type"] == "json_schema" and body["response_format"]["json_schema"]["strict"]
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["records"]["items"]["properties"]["score"]["type"] == ["number", "null"]
    assert "Generate 10 user records as JSON." in body["messages"][0]["content"]
    omitted = _body("openai", Cell("json_object", 10, 0.0, "omitted", None))
    assert not {"frequency_penalty", "presence_penalty", "repetition_penalty", "repeat_penalty"} & set(omitted)
    assert omitted["response_format"] == {"type": "json_object"}
    tool = _body("anthropic", Cell("tool", 40, 0.0, "none", None))
    assert tool["tool_choice"] == {"type": "tool", "name": "save_records"} and "seed" not in tool
    assert tool["tools"][0]["input_schema"]["required"] == ["records"] and tool["frequency_penalty"] == 0.0
    only = _body("openai", Cell("unconstrained", 3, 0.0, "none", None), PenaltyParams(repetition_penalty_fields=["x"]))
    assert only["x"] == 1.0 and "repetition_penalty" not in only


def test_the_shipped_example_is_one_record_with_every_field():
    prompt = records_prompt(7)
    example = json.loads(prompt.split("Example of one record:\n", 1)[1])
    assert list(example) == ["user_id", "user_name", "user_email", "created_at", "is_active", "score"]
    assert prompt.startswith("Generate 7 user records as JSON.")


def test_injection_check():
    base = ['{"records": [1, 2, 3]}'] * 4
    assert injection_check(base, list(base), 0.05) == 0
    assert injection_check(base, ['{"records": [1, 9]}'] * 4, 0.05) == 1
    # An endpoint that is itself nondeterministic: the omitted answers land among the explicit ones.
    noisy = ["abcdef", "abcxyz", "abcdef", "abqqqq"]
    assert injection_check(noisy, ["abcdef", "abcxyz", "abqrst", "abcdef"], 0.05) == 0
    assert injection_check(noisy, ["a0", "a1", "a2", "ab"], 0.05) == 0     # "ab" agrees as far as "abqqqq"
    assert injection_check(noisy, ["a0", "a1", "a2", "a3"], 0.05) == 1
    assert injection_check(base[:2], base[:2], 0.05) is None          # 1 / C(4, 2) = 1/6 is not rare


def test_ignored_check():
    base = ["A", "A", "B", "A"]
    assert ignored_check(base, ["A", "B", "A"]) == 1
    assert ignored_check(base, ["C", "A", "D"]) == 0
    assert ignored_check(["A", "B", "C", "D"], ["A"]) is None          # the baseline never repeats itself


def _row(cell, text, *, finish="stop", rejected=(), body=None, error=None, tool=None):
    return {"probe": "penalty", "final": True, "labels": cell.labels, **output_fields(text, None),
            "finish_reason": finish, "rejected_params": list(rejected), "request_body": body or {},
            "error_type": error, "tool_calls": tool or [], "protocol": "openai"}


def _records(n, corrupt_at=None):
    items = [{"user_id": i, "user_name": "a", "user_email": "a@x", "created_at": "t", "is_active": True,
              "score": 1} for i in range(n)]
    text = json.dumps({"records": items})
    if corrupt_at is not None:
        text = text.replace('"user_id"', "'user_id'", corrupt_at + 1).replace("'user_id'", '"user_id"', corrupt_at)
    return text


def _by_key(metrics):
    return {(m.name, json.dumps(m.labels, sort_keys=True)): m for m in metrics}


def test_summary_on_canned_rows():
    params = PenaltyParams(modes=["unconstrained"], n_records=[4], temperatures=[0.0],
                           penalties={"frequency_penalty": [1.0]}, repeats=3, baseline_repeats=3)
    none, omitted, freq = (Cell("unconstrained", 4, 0.0, p, v) for p, v in
                           (("none", None), ("omitted", None), ("frequency_penalty", 1.0)))
    body = {"frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0, "repeat_penalty": 1.0}
    rows = [_row(none, _records(4), body=body) for _ in range(3)]
    rows += [_row(omitted, _records(4)) for _ in range(3)]
    rows += [_row(freq, _records(4, corrupt_at=2), body=body),
             _row(freq, _records(4, corrupt_at=1), body=body),
             _row(freq, _records(4)[:-30], body=body),                      # stopped mid-record
             _row(freq, "", error="server_error", body=body)]
    rows[-2]["rejected_params"] = []
    m = _by_key(PROBE.summarize(rows, params, run_id="r", target="t"))

    def get(name, cell):
        return m[name, json.dumps(cell.labels, sort_keys=True)]

    assert get("error_rate", freq).value == 0.25 and get("error_rate", freq).n == 4
    assert get("corruption_rate", none).value == 0 and get("corruption_rate", freq).value == 1
    assert get("parse_rate", freq).value == 0 and get("quote_substitution_rate", freq).value == pytest.approx(2 / 3)
    assert get("premature_stop_rate", freq).value == pytest.approx(1 / 3)
    assert get("first_corruption_index", freq).value == pytest.approx((2 + 1 + 3) / 3)
    assert get("records_delivered", freq).value == pytest.approx((4 + 4 + 3) / 3)
    assert get("records_delivered", none).value == 4
    effect = get("penalty_effect", freq)
    assert effect.value == 1 and effect.ci_low > 0 and effect.n == 6
    assert get("penalty_effect_p", freq).value == pytest.approx(stats.fisher_exact(0, 3, 3, 3))
    assert get("penalty_ignored", freq).value == 0
    assert get("baseline_match_rate", omitted).value == 1 and get("baseline_match_rate", freq).value == 0
    check = m["penalties_applied_when_omitted", json.dumps({"mode": "unconstrained", "n_records": 4,
                                                            "temperature": 0.0}, sort_keys=True)]
    assert check.value == 0 and check.n == 6
    assert m["penalty_unsupported", json.dumps({"penalty": "frequency_penalty"})].value == 0


def test_refused_penalties_are_unsupported_not_ignored():
    params = PenaltyParams(modes=["unconstrained"], n_records=[2], temperatures=[0.0],
                           penalties={"presence_penalty": [1.5]}, repeats=2, baseline_repeats=2)
    rows = []
    for penalty, value in (("none", None), ("presence_penalty", 1.5)):
        cell = Cell("unconstrained", 2, 0.0, penalty, value)
        rows += [_row(cell, _records(2), rejected=["frequency_penalty", "presence_penalty", "repetition_penalty"],
                      body={"repeat_penalty": 1.0}) for _ in range(2)]
    metrics = PROBE.summarize(rows, params, run_id="r", target="t")
    values = {(m.name, m.labels.get("penalty")): m.value for m in metrics}
    assert values["penalty_unsupported", "presence_penalty"] == 1
    assert values["penalty_unsupported", "frequency_penalty"] == 1
    assert values["penalty_unsupported", "repetition_penalty"] == 0      # repeat_penalty went through
    assert ("penalty_ignored", "presence_penalty") not in values
    assert {m.labels["param"]: m.value for m in metrics if m.name == "rejected_param_requests"} == {
        "frequency_penalty": 4, "presence_penalty": 4, "repetition_penalty": 4}


def test_proportion_difference_matches_newcombe():
    # Newcombe (1998), table II, example (a): 56/70 against 48/80, method 10: 0.0524 to 0.3339.
    difference, low, high = stats.proportion_difference(48, 80, 56, 70)
    assert difference == pytest.approx(0.2)
    assert (low, high) == (pytest.approx(0.0524, abs=1e-4), pytest.approx(0.3339, abs=1e-4))
    low, high = stats.proportion_difference(0, 5, 5, 5)[1:]
    assert 0 < low < 0.5 and high == 1.0             # stays inside [-1, 1] at the extremes
    assert stats.proportion_difference(0, 0, 1, 1) == (None, None, None)
