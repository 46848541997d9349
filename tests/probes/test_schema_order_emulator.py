"""The emulator's schema-order effect and the schema_order suite end to end against it: the true
effect is set by the scenario, so detection rates, accuracies and sequential stopping can be
checked against what is known to be true."""

import json

import pytest

from prober.core import stats
from prober.core.errors import ConfigError
from prober.emulator import Scenario, load_scenario
from prober.emulator.behaviours import Pipeline, ServerState, base_behaviours
from prober.emulator.plan import GenRequest, PromptBlock
from prober.emulator.schema_order import item_outcomes
from prober.suites.datasets import SHIPPED_SCHEMA_ORDER, load_labelled_jsonl
from tests.support.emulated import run_suite_on_emulator

pytestmark = pytest.mark.emulator

ITEMS = load_labelled_jsonl(SHIPPED_SCHEMA_ORDER)
FAST = "first_token_delay_ms = 0\ndecode_tokens_per_s = 50000\nprefill_ms_per_token = 0\nslots = 16\n"


def _scenario(seed=0, **schema_order) -> Scenario:
    return Scenario.model_validate({"seed": seed, "schema_order": schema_order})


def _sweep(answer_first, reasoning_first, correlation, seeds=range(200), n=300):
    """The exact McNemar p-value of each seed's n items, from the emulator's own outcomes."""
    p_values = []
    for seed in seeds:
        settings = _scenario(seed, answer_first_accuracy=answer_first, reasoning_first_accuracy=reasoning_first,
                             correlation=correlation).schema_order
        outcomes = [item_outcomes(settings, seed, item.id) for item in ITEMS[:n]]
        a_only = sum(o["answer_first"] and not o["reasoning_first"] for o in outcomes)
        b_only = sum(o["reasoning_first"] and not o["answer_first"] for o in outcomes)
        p_values.append(stats.mcnemar(a_only, b_only).p_value)
    return p_values


@pytest.mark.parametrize("correlation", [0.0, 0.5, 0.9])
def test_a_true_difference_of_060_against_080_is_detected_in_95_percent_of_seeds(correlation):
    p_values = _sweep(0.6, 0.8, correlation)
    detected = sum(p < 0.05 for p in p_values) / len(p_values)
    print(f"correlation {correlation}: detected in {detected:.1%} of {len(p_values)} seeds")
    assert detected >= 0.95


def test_items_for_80_power_from_the_true_discordance_detects_about_80_percent():
    # Independent draws at 0.6 and 0.8: 12% of items right only answer-first, 32% only reasoning-first.
    needed = stats.mcnemar_items_for_power(1200, 3200, 10_000)
    p_values = _sweep(0.6, 0.8, 0.0, seeds=range(400), n=needed)
    detected = sum(p < 0.05 for p in p_values) / len(p_values)
    print(f"{needed} items: detected in {detected:.1%} of seeds")
    assert 0.7 <= detected <= 0.9


@pytest.mark.parametrize("accuracy, correlation", [(0.7, 0.0), (0.7, 0.5), (0.5, 0.3)])
def test_no_true_difference_is_found_in_at_most_5_percent_of_seeds(accuracy, correlation):
    # The exact test's real size here is about 4%; 1,000 seeds keep the sampling error of the
    # observed rate (about 0.6 points) from deciding the outcome.
    p_values = _sweep(accuracy, accuracy, correlation, seeds=range(1000))
    false_alarms = sum(p < 0.05 for p in p_values) / len(p_values)
    print(f"accuracy {accuracy}, correlation {correlation}: p < 0.05 in {false_alarms:.1%} of seeds")
    assert false_alarms <= 0.05


def test_outcomes_follow_the_scenario():
    settings = _scenario(answer_first_accuracy=0.6, reasoning_first_accuracy=0.8, correlation=1.0).schema_order
    outcomes = [item_outcomes(settings, 0, item.id) for item in ITEMS]
    # Fully correlated: one draw per item, so no item is right answer-first and wrong reasoning-first.
    assert not any(o["answer_first"] and not o["reasoning_first"] for o in outcomes)
    share = sum(o["reasoning_first"] for o in outcomes) / len(outcomes)
    assert 0.74 < share < 0.86
    assert item_outcomes(settings, 0, "weekday-0001") == item_outcomes(settings, 0, "weekday-0001")


def test_scenario_table_keys_and_errors(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("[schema_order]\nanswer_first_accuracy = 0.5\nrequired_first = true\n")
    settings = load_scenario(path).schema_order
    assert (settings.answer_first_accuracy, settings.reasoning_first_accuracy, settings.required_first) == \
        (0.5, 0.8, True)
    path.write_text("[schema_order]\naccuracy = 0.5\n")
    with pytest.raises(ConfigError, match="schema_order.accuracy"):
        load_scenario(path)


def _openai_request(prompt: str, properties: list[str], required=None, **body) -> GenRequest:
    schema = {"type": "object", "properties": {name: {"type": "string"} for name in properties},
              "required": required if required is not None else properties}
    body.setdefault("response_format", {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
    return GenRequest(protocol="openai", request_id="r", model="m", stream=True, max_tokens=300,
                      blocks=[PromptBlock("system", "Answer."), PromptBlock("messages", prompt, role="user")],
                      body=body)


def test_the_behaviour_answers_recognised_requests_and_leaves_the_rest_alone():
    pipeline = Pipeline(base_behaviours(_scenario(required_first=True)))
    state = ServerState(seq=0, in_flight=0, active=0, queued=0)
    item = ITEMS[0]
    plan = pipeline.plan(_openai_request(item.input, ["rationale", "label", "confidence"],
                                         required=["label", "confidence"]), state)
    answer = json.loads(plan.text)
    truth = plan.truth["schema_order"]
    assert list(answer) == ["label", "confidence", "rationale"] == truth["key_order"]   # required first
    assert truth["variant"] == "reasoning_first" and truth["expected"] == item.label
    assert (answer["label"] == item.label) == truth["correct"] and plan.tool_name is None
    assert plan.usage.output_tokens == len(plan.tokens)
    # Not a dataset item, or no label in the schema: left to the generic JSON answer
    # (prober/emulator/structured.py); no schema at all: the natural answer.
    natural = pipeline.plan(GenRequest(protocol="openai", request_id="r", model="m", stream=True, max_tokens=300,
                                       blocks=[PromptBlock("messages", "Hello", role="user")]), state).text
    for request, keys in ((_openai_request("Hello", ["label"]), ["label"]),
                          (_openai_request(item.input, ["answer"]), ["answer"])):
        plan = pipeline.plan(request, state)
        assert "schema_order" not in plan.truth and "structured" in plan.truth
        assert list(json.loads(plan.text)) == keys
    plan = pipeline.plan(_openai_request(item.input, ["label"], response_format={"type": "text"}), state)
    assert "schema_order" not in plan.truth and not plan.text.startswith("{")
    assert natural and not natural.startswith("{")


def test_a_forced_tool_is_answered_as_a_tool_call_and_max_tokens_cuts():
    pipeline = Pipeline(base_behaviours(_scenario()))
    state = ServerState(seq=0, in_flight=0, active=0, queued=0)
    schema = {"type": "object", "properties": {"label": {"type": "string"}, "rationale": {"type": "string"}}}
    request = GenRequest(protocol="anthropic", request_id="r", model="m", stream=True, max_tokens=5,
                         blocks=[PromptBlock("messages", ITEMS[3].input, role="user")],
                         body={"tools": [{"name": "record", "input_schema": schema}],
                               "tool_choice": {"type": "tool", "name": "record"}})
    plan = pipeline.plan(request, state)
    assert plan.tool_name == "record" and plan.finish == "length" and len(plan.tokens) == 5
    assert plan.truth["schema_order"]["variant"] == "answer_first"


def _run(tmp_path, scenario, protocol="openai", **params):
    overrides = {"concurrency": 16, **params}
    rows, metric_rows, truth = run_suite_on_emulator(tmp_path, FAST + scenario, protocol, "schema_order", overrides)
    metrics = {(m["name"], m["labels"].get("variant") or m["labels"].get("a")): m for m in metric_rows}
    return rows, metrics, truth


def test_end_to_end_a_true_effect_is_detected_and_matches_the_ground_truth(tmp_path):
    rows, metrics, truth = _run(tmp_path, "seed = 11\n[schema_order]\nanswer_first_accuracy = 0.6\n"
                                          "reasoning_first_accuracy = 0.8\ncorrelation = 0.5\n", limit=300)
    assert len(rows) == 600 and not [r for r in rows if r["error_type"]]
    pairs = {(r["labels"]["item"], r["labels"]["variant"]) for r in rows}
    assert len(pairs) == 600                     # every item under both variants, rebuilt from labels
    # Each stored answer is graded the way the emulator meant it.
    correct = {}
    for row in rows:
        record = truth[row["request_id"]]["behaviours"]["schema_order"]
        assert record["item"] == row["labels"]["item"] and record["variant"] == row["labels"]["variant"]
        correct[(record["item"], record["variant"])] = record["correct"]
    for variant in ("answer_first", "reasoning_first"):
        expected = sum(v for (_, name), v in correct.items() if name == variant) / 300
        assert metrics["accuracy", variant]["value"] == pytest.approx(expected)
        assert metrics["key_order_conformance", variant]["value"] == 1
    items = {item for item, _ in correct}
    a_only = sum(correct[(i, "answer_first")] and not correct[(i, "reasoning_first")] for i in items)
    assert metrics["discordant_a_only", "answer_first"]["value"] == a_only
    p = metrics["mcnemar_p", "answer_first"]["value"]
    difference = metrics["paired_difference", "answer_first"]
    print(f"accuracy {metrics['accuracy', 'answer_first']['value']:.3f} vs "
          f"{metrics['accuracy', 'reasoning_first']['value']:.3f}, p = {p:.2e}, difference {difference['value']:.3f} "
          f"[{difference['ci_low']:.3f}, {difference['ci_high']:.3f}]")
    assert p < 0.05 and metrics["mcnemar_mid_p", "answer_first"]["value"] <= p
    assert difference["ci_low"] < -0.2 < difference["ci_high"] < 0      # the true difference, and no zero
    assert metrics["items_for_80_power", "answer_first"]["value"] < 300
    assert metrics["items_evaluated", None]["value"] == 300 and metrics["requests_saved", None]["value"] == 0


def test_sequential_stopping_ends_a_decisive_run_early(tmp_path):
    rows, metrics, _ = _run(tmp_path, "seed = 5\n[schema_order]\nanswer_first_accuracy = 0.3\n"
                                      "reasoning_first_accuracy = 0.9\ncorrelation = 0.3\n",
                            limit=300, sequential=True, looks=5)
    evaluated = metrics["items_evaluated", None]["value"]
    saved = metrics["requests_saved", None]["value"]
    print(f"stopped after {evaluated} of 300 items, {saved} requests saved")
    assert evaluated < 300 and len(rows) == 2 * evaluated and saved == 2 * (300 - evaluated)
    assert metrics["sequential_stopped_early", None]["value"] == 1
    assert {r["labels"]["look"] for r in rows} == set(range(int(metrics["sequential_looks_used", None]["value"])))
    assert metrics["mcnemar_p", "answer_first"]["value"] < 0.05


def test_sequential_stopping_runs_to_the_end_without_an_effect(tmp_path):
    rows, metrics, _ = _run(tmp_path, "seed = 5\n[schema_order]\nanswer_first_accuracy = 0.7\n"
                                      "reasoning_first_accuracy = 0.7\n", limit=100, sequential=True, looks=4)
    assert len(rows) == 200 and metrics["requests_saved", None]["value"] == 0
    assert metrics["sequential_stopped_early", None]["value"] == 0


@pytest.mark.parametrize("protocol, mode", [("anthropic", "tool"), ("openai", "tool"), ("anthropic", "json_schema")])
def test_other_modes_and_protocols(tmp_path, protocol, mode):
    rows, metrics, truth = _run(tmp_path, "[schema_order]\nrequired_first = true\n", protocol, limit=20, mode=mode,
                                variants=[{"name": "answer_first", "properties": ["label", "confidence", "rationale"]},
                                          {"name": "optional_first", "properties": ["rationale", "label"],
                                           "required": ["label"]}])
    assert len(rows) == 40 and not [r for r in rows if r["error_type"]]
    if mode == "tool":
        assert all(r["tool_calls"] and r["tool_calls"][0]["name"] == "record_answer" for r in rows)
    graded = sum(truth[r["request_id"]]["behaviours"]["schema_order"]["correct"] for r in rows
                 if r["labels"]["variant"] == "optional_first")
    assert metrics["accuracy", "optional_first"]["value"] == pytest.approx(graded / 20)
    # required_first: the optional rationale declared first comes out after the label.
    assert metrics["key_order_conformance", "answer_first"]["value"] == 1
    assert metrics["key_order_conformance", "optional_first"]["value"] == 0
    # The emulator honours the structure asked for, as a tool call or JSON, on both protocols.
    for variant in ("answer_first", "optional_first"):
        assert metrics["structured_output_ignored_rate", variant]["value"] == 0
        assert metrics["schema_violation_rate", variant]["value"] == 0
        assert metrics["schema_violation_rate", variant]["n"] == 20


def test_the_scenario_can_name_a_users_dataset(tmp_path):
    path = tmp_path / "tickets.jsonl"
    path.write_text(json.dumps({"id": "t1", "input": "The site is down for everyone.", "label": "urgent",
                                "choices": ["urgent", "normal"]}) + "\n")
    pipeline = Pipeline(base_behaviours(_scenario(dataset=str(path), answer_first_accuracy=0.0)))
    plan = pipeline.plan(_openai_request("The site is down for everyone.", ["label"]),
                         ServerState(seq=0, in_flight=0, active=0, queued=0))
    assert plan.truth["schema_order"]["correct"] is False and json.loads(plan.text) == {"label": "normal"}
