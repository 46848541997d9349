"""A server's own error, in a stream's `error` event or in a 200 body, is kept on both protocols:
its message and class are stored, it is retried as the same HTTP status would be, and conformance
checks it against the error shape, never against a missing terminal event or a Message."""

from __future__ import annotations

import json

import pytest

from prober.core.records import ChatRequest, Exchange
from prober.run.retry import should_retry
from prober.targets.conformance import check_exchange
from prober.targets.errors import classify_error
from tests.support.scripted_server import json_response
from tests.targets.test_targets_edge_cases import USER, send_all, sse

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]

# (error event data, the class it names, the HTTP status of that class, the message it carries)
SHAPES = [
    # llama-server's exact event while its model loads: no nested error object.
    ({"code": 503, "message": "Loading model", "type": "unavailable_error"}, "overloaded", 503, "Loading model"),
    ({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "overloaded", 529,
     "Overloaded"),
    ({"error": {"type": "rate_limit_error", "message": "slow down"}}, "rate_limited", 429, "slow down"),
    ({"error": {"message": "upstream failed", "type": "server_error", "code": None}}, "server_error", 500,
     "upstream failed"),
    ({"code": 429}, "rate_limited", 429, None),
    ({"code": 500, "message": "boom"}, "server_error", 500, "boom"),
]

ANTHROPIC_START = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
                   b'"role":"assistant","content":[],"model":"m","stop_reason":null,"stop_sequence":null,'
                   b'"usage":{"input_tokens":5,"output_tokens":1}}}\n\n')
ANTHROPIC_TEXT = (b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
                  b'"content_block":{"type":"text","text":""}}\n\n'
                  b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
                  b'"delta":{"type":"text_delta","text":"Hel"}}\n\n')
OPENAI_TEXT = (b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
               b'"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}\n\n')


def error_event(data: dict) -> bytes:
    return b"event: error\ndata: " + json.dumps(data).encode() + b"\n\n"


def streamed(protocol: str, data: dict) -> Exchange:
    before = [ANTHROPIC_START, ANTHROPIC_TEXT] if protocol == "anthropic" else [OPENAI_TEXT]

    async def handler(request, writer, server):
        writer.write(sse(*before, error_event(data)))

    [ex], _ = send_all(handler, protocol, [ChatRequest(messages=USER)])
    return ex


def http_error(status: int) -> Exchange:
    """What the adapter makes of the same class sent as an HTTP status, for comparison."""
    ex = Exchange(protocol="openai", url="u", request_body={}, request_headers={}, started_at=None,  # type: ignore[arg-type]
                  start_ns=0, status=status)
    ex.error_type, ex.error_message = classify_error(status, None)
    return ex


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
@pytest.mark.parametrize(("data", "kind", "status", "message"), SHAPES)
def test_an_error_event_keeps_the_servers_class_and_message_whatever_its_shape(protocol, data, kind, status, message):
    ex = streamed(protocol, data)
    assert ex.error_type == kind
    assert ex.error_message.startswith("error event after HTTP 200")
    if message is not None:
        assert message in ex.error_message
    assert ex.text == "Hel"                                   # what came before the error is kept
    assert "notices" not in ex.extra                          # not an "unknown event type"
    # Retried exactly as the same class answered as an HTTP status would be.
    assert should_retry(ex, 1, 3) == should_retry(http_error(status), 1, 3)
    findings = check_exchange(ex)
    assert not any("without message_stop" in f or "without [DONE]" in f for f in findings), findings
    assert not any("SSE event name" in f for f in findings), findings


def test_the_error_events_shape_is_checked_against_each_protocols_error_type():
    # llama-server's flat shape is not Anthropic's ErrorResponse nor OpenAI's {"error": {...}}.
    flat = {"code": 503, "message": "Loading model", "type": "unavailable_error"}
    anthropic = check_exchange(streamed("anthropic", flat))
    assert anthropic and all(f.startswith("anthropic error #") for f in anthropic), anthropic
    assert check_exchange(streamed("openai", flat)) == ["openai error event #1: no error object"]
    # Each protocol's own shape conforms.
    assert check_exchange(streamed("anthropic", SHAPES[1][0])) == []
    assert check_exchange(streamed("openai", SHAPES[3][0])) == []


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
@pytest.mark.parametrize("body", [
    {"error": {"message": "model is loading", "type": "unavailable_error", "code": 503}},
    {"code": 503, "message": "model is loading", "type": "unavailable_error"},
    {"type": "error", "error": {"type": "overloaded_error", "message": "model is loading"}},
])
def test_a_200_error_body_is_classified_and_checked_against_the_error_shape(protocol, body):
    async def handler(request, writer, server):
        writer.write(json_response(200, body))

    [ex], _ = send_all(handler, protocol, [ChatRequest(messages=USER, stream=False)])
    assert ex.status == 200 and ex.error_type == "overloaded"
    assert "model is loading" in ex.error_message
    findings = check_exchange(ex)
    # Never the Message / ChatCompletion fields an error body has no reason to carry.
    for absent in ("choices", "content", "role", "model:", "id:", "usage"):
        assert not any(absent in f for f in findings), findings
    assert all("error body (HTTP 200)" in f for f in findings), findings


def test_a_200_answer_is_still_a_message_not_an_error():
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn",
               "stop_sequence": None, "content": [{"type": "text", "text": "the message: fine"}],
               "usage": {"input_tokens": 3, "output_tokens": 2}}

    async def handler(request, writer, server):
        writer.write(json_response(200, message))

    [ex], _ = send_all(handler, "anthropic", [ChatRequest(messages=USER, stream=False)])
    assert ex.ok and ex.text == "the message: fine" and check_exchange(ex) == []
