"""The schema-order probe's pieces: the shipped dataset and its generator, user datasets and their
errors, request building per mode, and grading with key order."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from prober.core.errors import ConfigError
from prober.probes.schema_order import SchemaOrderParams, SchemaVariant, build_request, grade, output_json_text
from prober.suites.datasets import SHIPPED_SCHEMA_ORDER, load_labelled_jsonl
from prober.suites.loader import load_suite
from tests.support.cli import prober

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def test_the_generator_reproduces_the_committed_dataset_byte_for_byte(tmp_path):
    out = tmp_path / "again.jsonl"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_schema_order_dataset.py"), "--out", str(out)],
                   check=True, capture_output=True)
    assert out.read_bytes() == SHIPPED_SCHEMA_ORDER.read_bytes()


def test_shipped_labels_are_the_computed_weekdays():
    items = load_labelled_jsonl(SHIPPED_SCHEMA_ORDER)
    assert len(items) >= 300 and len({item.id for item in items}) == len(items)
    for item in items:
        start = WEEKDAYS.index(re.search(r"planned for a (\w+)\.", item.input).group(1))
        shift = 0
        for match in re.finditer(r"(\d+) days( earlier| later)?", item.input):
            before = item.input[:match.start()]
            later = match.group(2) == " later" or before.endswith(("postponed by ", "pushed back ", "delayed by "))
            shift += int(match.group(1)) if later else -int(match.group(1))
        assert item.label == WEEKDAYS[(start + shift) % 7], item
        assert item.choices == tuple(WEEKDAYS)
    # Every label occurs, none dominates: a constant guess cannot look like skill.
    counts = {day: sum(item.label == day for item in items) for day in WEEKDAYS}
    assert max(counts.values()) / len(items) < 0.25


def test_the_dataset_ships_with_the_package():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"data/*.jsonl"' in pyproject
    assert SHIPPED_SCHEMA_ORDER.parent == ROOT / "prober" / "suites" / "data"


@pytest.mark.parametrize("lines, message", [
    (['{"id": "a", "input": "q", "label": "x"}', "{not json"], "line 2: not valid JSON"),
    (['{"id": "a", "input": "q"}'], "line 1: label: must be a non-empty string"),
    (['{"id": "a", "input": "q", "label": "x", "choices": ["y", "z"]}'], "line 1: label 'x' is not one of"),
    (['{"id": "a", "input": "q", "label": "x"}', "", '{"id": "a", "input": "r", "label": "y"}'],
     "line 3: id 'a' used twice"),
    (['["a", "b"]'], "line 1: each line must be a JSON object"),
    (['{"id": "a", "input": "q", "label": "x", "answer": "x"}'], "line 1: answer: unknown key"),
    ([], "the dataset has no items"),
])
def test_malformed_datasets_name_file_and_line(tmp_path, lines, message):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: {message}")):
        load_labelled_jsonl(path)


def test_a_bad_dataset_is_a_usage_error_at_the_cli(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "input": "q", "label": "x"}\n{"id": "b", "input": "r"\n')
    run = prober("run", "--suite", "schema_order", "--target", "emulator", "--param", f'dataset="{bad}"',
                 cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"{bad}: line 2: not valid JSON" in run.stderr and "Traceback" not in run.stderr
    missing = prober("run", "--suite", "schema_order", "--target", "emulator", "--param",
                     f'dataset="{tmp_path}/nope.jsonl"', cwd=tmp_path)
    assert missing.returncode == 2 and "nope.jsonl: dataset file not found" in missing.stderr


def test_a_users_dataset_and_limit(tmp_path):
    path = tmp_path / "tickets.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "input": f"Ticket {i}: the site is down",
                                        "label": "urgent"}) + "\n" for i in range(5)))
    params = SchemaOrderParams.model_validate({"dataset": str(path), "limit": 3})
    assert [item.id for item in params.items()] == ["t0", "t1", "t2"]
    request = build_request(params.items()[0], params.variants[0], params, "openai")
    assert request.json_schema["schema"]["properties"]["label"] == {"type": "string", "description": "the answer"}


def test_a_relative_dataset_is_read_next_to_the_suite_file_but_from_the_cwd_on_the_command_line(tmp_path,
                                                                                              monkeypatch):
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "tickets.jsonl").write_text(json.dumps({"id": "s1", "input": "Ticket: down", "label": "urgent"}) + "\n")
    (suites / "triage.toml").write_text('[[probes]]\nprobe = "schema_order"\n[probes.params]\n'
                                        'dataset = "tickets.jsonl"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "tickets.jsonl").write_text(json.dumps({"id": "c1", "input": "Ticket: slow", "label": "low"}) + "\n")
    monkeypatch.chdir(elsewhere)
    from_file = load_suite("triage", [str(suites)]).entries[0].params
    assert [item.id for item in from_file.items()] == ["s1"]
    from_command_line = load_suite("triage", [str(suites)], {"dataset": "tickets.jsonl"}).entries[0].params
    assert [item.id for item in from_command_line.items()] == ["c1"]


@pytest.mark.parametrize("variants, message", [
    ([{"name": "a", "properties": ["confidence"]}, {"name": "b", "properties": ["label"]}], "must include 'label'"),
    ([{"name": "a", "properties": ["label", "steps"]}, {"name": "b", "properties": ["label"]}],
     "unknown field 'steps'"),
    ([{"name": "a", "properties": ["label"]}, {"name": "a", "properties": ["label"]}], "variant names must be unique"),
    ([{"name": "a", "properties": ["label"], "required": ["rationale"]}, {"name": "b", "properties": ["label"]}],
     "required field 'rationale'"),
    ([{"name": "a", "properties": ["label"]}], "at least 2"),
])
def test_bad_variants_are_configuration_errors(variants, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_suite("schema_order", [], {"variants": variants})


def test_requests_keep_the_declared_order_per_mode():
    params = SchemaOrderParams.model_validate({"limit": 2})
    item = params.items()[0]
    answer_first, reasoning_first = params.variants
    request = build_request(item, reasoning_first, params, "openai")
    schema = request.json_schema["schema"]
    assert list(schema["properties"]) == ["evidence", "rationale", "label", "confidence"]
    assert schema["required"] == list(schema["properties"]) and request.json_schema["strict"] is True
    assert schema["properties"]["label"]["enum"] == WEEKDAYS and schema["additionalProperties"] is False
    assert request.messages == [{"role": "user", "content": item.input}] and request.system == params.instructions
    assert request.sampling == {"temperature": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0, "seed": 1234}
    assert build_request(item, answer_first, params, "anthropic").sampling == {"temperature": 0.0}

    optional = SchemaVariant(name="optional_first", properties=["rationale", "label"], required=["label"])
    request = build_request(item, optional, params, "openai")
    assert request.json_schema["strict"] is False and request.json_schema["schema"]["required"] == ["label"]

    tool_params = SchemaOrderParams.model_validate({"limit": 2, "mode": "tool"})
    request = build_request(item, answer_first, tool_params, "anthropic")
    assert request.json_schema is None
    assert request.tool_choice == {"type": "tool", "name": request.tools[0]["name"]}
    assert list(request.tools[0]["input_schema"]["properties"]) == ["label", "confidence", "rationale"]


def test_grading_is_exact_and_reads_key_order():
    declared = ["evidence", "label", "confidence"]
    right = grade('{"evidence": "x", "label": " monday", "confidence": 0.9}', "Monday", declared)
    assert right.parsed and right.correct and right.in_declared_order
    swapped = grade('{"label": "Monday", "evidence": "x", "confidence": 0.9}', "Monday", declared)
    assert swapped.correct and swapped.in_declared_order is False
    # An optional key left out does not break the order; an undeclared key is not an order matter.
    assert grade('{"label": "Tuesday", "extra": 1}', "Monday", declared).in_declared_order is True
    assert grade('{"label": "Tuesday"}', "Monday", declared).correct is False
    for broken in ('{"evidence": "x", "label": "Mon', '["Monday"]', "Monday", "", '{"label": 3}'):
        result = grade(broken, "Monday", declared)
        assert not result.correct
    assert grade('{"label": {"nested": "Monday"}}', "Monday", declared).parsed
    # Tool calls: the input as stored (parsed, order kept) or as raw text when it did not parse.
    call = {"type": "tool_use", "id": "t", "name": "record_answer", "input": {"label": "Monday", "evidence": "x"}}
    assert grade(output_json_text("", [call]), "Monday", declared).in_declared_order is False
    raw = {**call, "input": '{"evidence": "x", "label": "Mon', "parse_error": True}
    assert not grade(output_json_text("", [raw]), "Monday", declared).parsed
