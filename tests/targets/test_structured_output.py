"""Structured output honoured or not, on both protocols' request shapes and the Responses API's:
an answer that is not JSON (or not the forced tool call) is `structured_output_ignored`, JSON off
the requested schema is `schema_violation`, and both codes are read back from the finding lines."""

from __future__ import annotations

import datetime as dt

import pytest

from prober.core.findings import FINDING_CODES, finding_code, structured_output_counts
from prober.core.records import Exchange
from prober.targets.anthropic import AnthropicAdapter
from prober.targets.openai import OpenAIAdapter
from prober.targets.structured import schema_errors, structured_output_findings

pytestmark = pytest.mark.unit

SCHEMA = {"type": "object", "properties": {"sentiment": {"type": "string", "enum": ["positive", "negative"]},
                                           "rating": {"type": "integer"}},
          "required": ["sentiment", "rating"], "additionalProperties": False}
TOOL = {"name": "record", "description": "d", "input_schema": SCHEMA}


def exchange(protocol: str, body: dict, text: str = "", tool_calls: list | None = None,
             finish_reason: str = "stop") -> Exchange:
    return Exchange(protocol=protocol, url="u", request_body=body, request_headers={},  # type: ignore[arg-type]
                    started_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), start_ns=0, status=200, text=text,
                    tool_calls=tool_calls or [], finish_reason=finish_reason)


def codes(ex: Exchange) -> list[str | None]:
    return [finding_code(line) for line in structured_output_findings(ex)]


# The request bodies each protocol's adapter builds, plus the Responses API's text.format.
def bodies() -> dict[str, tuple[str, dict]]:
    from prober.core.config import TargetConfig
    from prober.core.records import ChatRequest
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}],
                          json_schema={"name": "review", "schema": SCHEMA})
    out = {}
    for protocol, adapter in (("anthropic", AnthropicAdapter), ("openai", OpenAIAdapter)):
        target = TargetConfig(protocol=protocol, base_url="http://127.0.0.1:9", model="m", name="t")
        out[protocol] = (protocol, _build(adapter, target, request))
    out["responses"] = ("openai", {"model": "m", "input": "hi",
                                   "text": {"format": {"type": "json_schema", "name": "review", "schema": SCHEMA}}})
    return out


def _build(adapter, target, request):
    """The adapter's own body for the request, without opening a transport (a unit test)."""
    instance = adapter.__new__(adapter)
    instance.target = target
    if adapter is OpenAIAdapter:
        instance.max_tokens_field = "max_tokens"
    return instance.build_body(request)[0]


@pytest.mark.parametrize("shape", ["anthropic", "openai", "responses"])
def test_prose_json_off_schema_and_conforming_json(shape):
    protocol, body = bodies()[shape]
    assert any(key in body for key in ("output_config", "response_format", "text"))
    assert codes(exchange(protocol, body, "Sure! The review is positive.")) == ["structured_output_ignored"]
    assert codes(exchange(protocol, body, '{"sentiment": "great", "rating": 4}')) == ["schema_violation"]
    assert codes(exchange(protocol, body, '{"sentiment": "positive"}')) == ["schema_violation"]
    assert codes(exchange(protocol, body, '{"sentiment": "positive", "rating": 4, "x": 1}')) == ["schema_violation"]
    assert codes(exchange(protocol, body, ' {"sentiment": "positive", "rating": 4}\n')) == []
    # JSON cut by max_tokens followed the structure as far as it went; prose cut so did not.
    assert codes(exchange(protocol, body, '{"sentiment": "pos', finish_reason="length")) == []
    assert codes(exchange(protocol, body, "Sure! The", finish_reason="max_tokens")) == ["structured_output_ignored"]
    # A failed request says nothing about structure; a request that asked for none neither.
    failed = exchange(protocol, body, "")
    failed.error_type = "server_error"
    assert codes(failed) == []
    assert codes(exchange(protocol, {"model": "m", "messages": []}, "prose")) == []


@pytest.mark.parametrize(("protocol", "tools", "choice", "call"), [
    ("anthropic", [TOOL], {"type": "tool", "name": "record"},
     lambda args: {"type": "tool_use", "id": "t", "name": "record", "input": args}),
    ("openai", [{"type": "function", "function": {"name": "record", "parameters": SCHEMA}}],
     {"type": "function", "function": {"name": "record"}},
     lambda args: {"type": "function", "id": "c", "name": "record", "input": args}),
])
def test_a_forced_tool_call_is_required_and_checked_against_its_schema(protocol, tools, choice, call):
    body = {"model": "m", "messages": [], "tools": tools, "tool_choice": choice}
    assert codes(exchange(protocol, body, "I would rather talk.")) == ["structured_output_ignored"]
    assert codes(exchange(protocol, body, tool_calls=[call({"sentiment": "positive", "rating": 5})])) == []
    assert codes(exchange(protocol, body, tool_calls=[call({"sentiment": "positive", "rating": "5"})])) == \
        ["schema_violation"]
    broken = {**call("{not json"), "parse_error": True}
    assert codes(exchange(protocol, body, tool_calls=[broken])) == ["structured_output_ignored"]
    # "any tool" / "required": any call will do, none will not.
    anyone = {**body, "tool_choice": {"type": "any"} if protocol == "anthropic" else "required"}
    assert codes(exchange(protocol, anyone, "prose")) == ["structured_output_ignored"]


def test_schema_errors_name_the_place_and_the_rule():
    assert schema_errors({"rating": True, "sentiment": "positive"}, SCHEMA) == \
        ["$.rating: bool where integer is required"]
    assert schema_errors([1, "2"], {"type": "array", "items": {"type": "integer"}}) == \
        ["$[1]: str where integer is required"]
    assert schema_errors(3.0, {"type": "integer"}) == []
    assert schema_errors("x", {"anyOf": [{"type": "integer"}, {"type": "null"}]}) == ["$: matches none of anyOf"]
    assert schema_errors("x", {"type": "string", "minLength": 5, "pattern": "^y"}) == []   # not checked


def test_every_finding_line_the_checkers_write_has_a_code():
    lines = {
        "anthropic stream without message_stop": "anthropic_no_message_stop",
        "anthropic error body (HTTP 400): type: Field required": "anthropic_error_body_shape",
        "anthropic error #3: error: Field required": "anthropic_error_body_shape",
        "anthropic message: content: Field required": "anthropic_message_shape",
        "anthropic content_block_delta #4: delta.text: Input should be a valid string": "anthropic_event_shape",
        "anthropic content_block_delta #4: delta for block 2 that is not open": "anthropic_event_order",
        "anthropic message_delta #2: SSE event name 'x' but data.type 'message_delta'": "anthropic_event_name",
        "openai error body (HTTP 400): no error object": "openai_error_body_shape",
        "openai chunk #2: choices[0].delta.content: Input should be a valid string": "openai_chunk_shape",
        "openai chunk #5: usage chunk with non-empty choices": "openai_usage_chunk_choices",
        "openai stream without [DONE]": "openai_no_done",
        "openai chat.completion: choices: Field required": "openai_completion_shape",
        "parameter temperature rejected: resent without it": "parameter_rejected",
        "structured_output_ignored: output_config asked for JSON; the answer is not JSON: 'Sure'":
            "structured_output_ignored",
        "schema_violation: response_format: $.rating: missing": "schema_violation",
    }
    assert {line: finding_code(line) for line in lines} == lines
    assert set(lines.values()) <= set(FINDING_CODES)
    assert finding_code("something new and unheard of") is None


def test_structured_output_counts_count_answers_not_lines():
    findings = [["structured_output_ignored: x"], None, ["schema_violation: a", "schema_violation: b"], []]
    assert structured_output_counts(findings) == [("structured_output_ignored_rate", 1), ("schema_violation_rate", 1)]


def test_the_operations_guide_lists_every_finding_code():
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    assert [code for code in FINDING_CODES if f"| `{code}` |" not in guide] == []
