"""The protocol adapters: request bodies and headers, and every failure shape, against a scripted
loopback server. The adapter never raises for an endpoint failure."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from prober.core.config import TargetConfig
from prober.core.records import ERROR_TYPES, ChatRequest
from prober.targets import make_adapter
from prober.targets.anthropic import AnthropicAdapter
from prober.targets.conformance import check_exchange
from prober.targets.openai import OpenAIAdapter
from tests.support.scripted_server import (
    LAST_CHUNK,
    ScriptedServer,
    chunk,
    json_response,
    response_bytes,
    sse_head,
)

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]
USER = [{"role": "user", "content": "hi"}]


def target(protocol: str, url: str = "http://127.0.0.1:9", **kw) -> TargetConfig:
    return TargetConfig(protocol=protocol, base_url=url, model="model-x", name="t", **kw)


def run_with(handler, protocol: str, requests: list[ChatRequest], key: str | None = "sk-secret", **kw):
    async def main():
        async with ScriptedServer(handler) as server:
            adapter = make_adapter(target(protocol, server.url, **kw), server.url, key)
            exchanges = [await adapter.send(request) for request in requests]
            await adapter.aclose()
            return exchanges, server
    return asyncio.run(main())


# --- request bodies and headers ------------------------------------------------------------------

FULL = ChatRequest(
    messages=USER, max_tokens=50, system="be brief",
    sampling={"temperature": 0, "top_p": 1, "frequency_penalty": 0, "presence_penalty": 0, "seed": 7,
              "stop": "END"},
    tools=[{"name": "get_weather", "description": "d",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    tool_choice={"name": "get_weather"},
    json_schema={"name": "answer", "schema": {"type": "object"}, "strict": True},
    extra={"metadata": {"user_id": "u"}})


def test_anthropic_body():
    adapter = AnthropicAdapter(target("anthropic"), "http://h", None)
    body, notes = adapter.build_body(FULL)
    assert body == {
        "model": "model-x", "max_tokens": 50, "system": "be brief", "messages": USER,
        "temperature": 0, "top_p": 1, "frequency_penalty": 0, "presence_penalty": 0, "seed": 7,
        "stop_sequences": ["END"],
        "tools": FULL.tools, "tool_choice": {"type": "tool", "name": "get_weather"},
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
        "stream": True, "metadata": {"user_id": "u"}}
    assert notes == []
    body, notes = adapter.build_body(ChatRequest(messages=USER, json_object=True, stream=False,
                                                 sampling={"temperature": 1}), skip={"temperature"})
    assert "temperature" not in body and body["stream"] is False
    assert notes == ["json_object has no Anthropic equivalent: not sent"]


def test_openai_body():
    adapter = OpenAIAdapter(target("openai"), "http://h/v1", None)
    body, _ = adapter.build_body(FULL)
    assert body == {
        "model": "model-x", "max_tokens": 50,
        "messages": [{"role": "system", "content": "be brief"}, *USER],
        "temperature": 0, "top_p": 1, "frequency_penalty": 0, "presence_penalty": 0, "seed": 7,
        "stop": "END",
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "d",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "answer", "schema": {"type": "object"}, "strict": True}},
        "stream": True, "stream_options": {"include_usage": True}, "metadata": {"user_id": "u"}}
    body, _ = adapter.build_body(ChatRequest(
        messages=USER, json_object=True, tool_choice="any",
        system=[{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}],
        extra={"stream_options": {"include_obfuscation": False}}))
    assert body["response_format"] == {"type": "json_object"}
    assert body["tool_choice"] == "required"
    assert body["messages"][0] == {"role": "system", "content": [{"type": "text", "text": "a"}]}
    assert body["stream_options"] == {"include_usage": True, "include_obfuscation": False}


def test_anthropic_converts_openai_tools():
    adapter = AnthropicAdapter(target("anthropic"), "http://h", None)
    body, _ = adapter.build_body(ChatRequest(messages=USER, tool_choice="required", tools=[
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]))
    assert body["tools"] == [{"name": "f", "input_schema": {"type": "object"}}]
    assert body["tool_choice"] == {"type": "any"}


@pytest.mark.parametrize("protocol,base,path", [
    ("openai", "/v1", "/v1/chat/completions"), ("openai", "", "/v1/chat/completions"),
    ("openai", "/proxy/v1/", "/proxy/v1/chat/completions"), ("anthropic", "", "/v1/messages")])
def test_urls_and_headers(protocol, base, path):
    async def handler(request, writer, server):
        writer.write(json_response(500, {"error": {"message": "no"}}))

    async def main():
        async with ScriptedServer(handler) as server:
            url = server.url + base
            adapter = make_adapter(target(protocol, url, headers={"X-Team": "a"}), url, "sk-secret")
            ex = await adapter.send(ChatRequest(messages=USER))
            await adapter.aclose()
            return ex, server.requests[0]
    ex, request = asyncio.run(main())
    assert request.path == path and ex.url.endswith(path)
    assert request.headers["x-team"] == "a"
    assert request.headers["accept"] == "text/event-stream"
    if protocol == "openai":
        assert request.headers["authorization"] == "Bearer sk-secret"
        assert ex.request_headers["authorization"] == "[redacted]"
    else:
        assert request.headers["x-api-key"] == "sk-secret"
        assert request.headers["anthropic-version"] == "2023-06-01"
        assert ex.request_headers["x-api-key"] == "[redacted]"
    assert "sk-secret" not in repr(ex)
    assert json.loads(request.body) == ex.request_body


# --- failures --------------------------------------------------------------------------------------

def _stream(*events: bytes, end: bytes = LAST_CHUNK, headers=None) -> bytes:
    return sse_head(headers=headers) + b"".join(chunk(e) for e in events) + end


ANTHROPIC_START = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
                   b'"role":"assistant","content":[],"model":"m","stop_reason":null,"stop_sequence":null,'
                   b'"usage":{"input_tokens":5,"output_tokens":1}}}\n\n')
ANTHROPIC_BLOCK = (b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
                   b'"content_block":{"type":"text","text":""}}\n\n'
                   b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
                   b'"delta":{"type":"text_delta","text":"Hel"}}\n\n')


def test_anthropic_error_event_after_200():
    overloaded = (b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
                  b'"message":"Overloaded"}}\n\n')

    async def handler(request, writer, server):
        writer.write(_stream(ANTHROPIC_START, b"event: ping\ndata: {\"type\": \"ping\"}\n\n",
                             ANTHROPIC_BLOCK, overloaded))

    [ex], _ = run_with(handler, "anthropic", [ChatRequest(messages=USER)])
    assert (ex.status, ex.error_type) == (200, "overloaded")
    assert "Overloaded" in ex.error_message
    assert ex.text == "Hel" and ex.usage == {"input_tokens": 5, "output_tokens": 1}
    assert check_exchange(ex) == []


def test_openai_error_data_after_200():
    async def handler(request, writer, server):
        writer.write(_stream(b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
                             b'"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\n\n',
                             b'data: {"error":{"message":"boom","type":"server_error"}}\n\n'))

    [ex], _ = run_with(handler, "openai", [ChatRequest(messages=USER)])
    assert (ex.status, ex.error_type, ex.text) == (200, "server_error", "x")
    assert "boom" in ex.error_message


@pytest.mark.parametrize("status,body,expected", [
    (429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}, "rate_limited"),
    (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "overloaded"),
    (503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}, "overloaded"),
    (500, {"type": "error", "error": {"type": "api_error", "message": "x"}}, "server_error"),
    (401, {"type": "error", "error": {"type": "authentication_error", "message": "key"}}, "auth"),
    (404, {"type": "error", "error": {"type": "not_found_error", "message": "model"}}, "bad_request"),
])
def test_http_error_statuses(status, body, expected):
    async def handler(request, writer, server):
        writer.write(json_response(status, body, {"retry-after": "3", "retry-after-ms": "2500",
                                                  "request-id": "req_9",
                                                  "anthropic-ratelimit-requests-remaining": "0",
                                                  "x-unrelated": "dropped"}))

    [ex], _ = run_with(handler, "anthropic", [ChatRequest(messages=USER)])
    assert ex.error_type == expected and ex.status == status
    assert ex.response_headers["retry-after"] == "3"
    assert ex.response_headers["retry-after-ms"] == "2500"
    assert ex.response_headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert "x-unrelated" not in ex.response_headers
    assert ex.request_id == "req_9"
    assert ex.error_message.startswith(str(status))


def test_json_error_body_on_stream_request_openai():
    async def handler(request, writer, server):
        message = "request (731 tokens) exceeds the available context size"
        writer.write(json_response(400, {"error": {"code": 400, "type": "exceed_context_size_error",
                                                   "message": message}}))

    [ex], _ = run_with(handler, "openai", [ChatRequest(messages=USER)])
    assert ex.error_type == "bad_request" and "exceeds" in ex.error_message
    assert ex.rejected_params == []


def test_dropped_connection_mid_stream():
    async def handler(request, writer, server):
        writer.write(_stream(ANTHROPIC_START, ANTHROPIC_BLOCK, end=b""))
        await writer.drain()
        await asyncio.sleep(0.05)
        return False

    [ex], _ = run_with(handler, "anthropic", [ChatRequest(messages=USER)])
    assert ex.error_type == "connection" and ex.text == "Hel"
    assert ex.first_token_ns is not None and ex.end_ns >= ex.first_token_ns
    assert check_exchange(ex) == []      # cut by the transport: no missing-message_stop finding


def test_stall_is_a_read_timeout():
    async def handler(request, writer, server):
        writer.write(_stream(ANTHROPIC_START, end=b""))
        await writer.drain()
        await asyncio.sleep(3)

    [ex], _ = run_with(handler, "anthropic", [ChatRequest(messages=USER)],
                       timeouts={"connect": 1, "read": 0.3, "total": 10})
    assert ex.error_type == "timeout" and "read timeout" in ex.error_message
    assert 250 < ex.e2e_ms < 2000


def test_stream_ending_without_terminal_event_is_protocol_error():
    async def handler(request, writer, server):
        writer.write(_stream(ANTHROPIC_START, ANTHROPIC_BLOCK))

    [ex], _ = run_with(handler, "anthropic", [ChatRequest(messages=USER)])
    assert ex.error_type == "protocol" and "message_stop" in ex.error_message
    assert check_exchange(ex) == ["anthropic stream without message_stop"]


def test_undecodable_json_event_is_protocol_error():
    async def handler(request, writer, server):
        writer.write(_stream(b"data: {not json\n\n"))

    [ex], _ = run_with(handler, "openai", [ChatRequest(messages=USER)])
    assert ex.error_type == "protocol" and "undecodable JSON" in ex.error_message


def test_undecodable_non_stream_body_is_protocol_error():
    async def handler(request, writer, server):
        writer.write(response_bytes(200, b"<html>", {"Content-Type": "application/json"}))

    [ex], _ = run_with(handler, "openai", [ChatRequest(messages=USER, stream=False)])
    assert ex.error_type == "protocol"


def test_connection_refused_is_a_sample_not_an_exception():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()

    async def main():
        adapter = make_adapter(target("openai", url), url, None)
        ex = await adapter.send(ChatRequest(messages=USER))
        await adapter.aclose()
        return ex
    ex = asyncio.run(main())
    assert ex.error_type == "connection" and ex.status is None and ex.end_ns >= ex.start_ns


def test_comments_pings_and_unknown_events_are_tolerated():
    async def handler(request, writer, server):
        writer.write(_stream(b":\n\n", ANTHROPIC_START, b": keep-alive\n\n",
                             b'event: brand_new\ndata: {"type":"brand_new"}\n\n', ANTHROPIC_BLOCK,
                             b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
                             b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn",'
                             b'"stop_sequence":null},"usage":{"output_tokens":2}}\n\n'
                             b'event: message_stop\ndata: {"type":"message_stop"}\n\n'))

    [ex], _ = run_with(handler, "anthropic", [ChatRequest(messages=USER)])
    assert ex.ok and ex.text == "Hel" and ex.finish_reason == "end_turn"
    assert ex.usage == {"input_tokens": 5, "output_tokens": 2}
    assert ex.extra["sse_comments"] == 2
    # The API says new event types may appear: a notice on the sample, not non-conformance.
    assert check_exchange(ex) == []
    assert ex.extra["notices"] == ["unknown event type 'brand_new' ignored"]


def test_stream_request_answered_with_plain_json():
    async def handler(request, writer, server):
        writer.write(json_response(200, {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                                         "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                             "role": "assistant", "content": "plain"}}]}))

    [ex], _ = run_with(handler, "openai", [ChatRequest(messages=USER)])
    assert ex.ok and ex.text == "plain" and ex.usage is None
    assert any("not an event stream" in finding for finding in ex.findings)


# --- rejected parameters ---------------------------------------------------------------------------

def test_rejected_parameters_are_dropped_recorded_and_remembered():
    async def handler(request, writer, server):
        body = request.json()
        if "temperature" in body:
            writer.write(json_response(400, {"type": "error", "error": {
                "type": "invalid_request_error",
                "message": "temperature: temperature is deprecated for this model"}}))
        elif "frequency_penalty" in body:
            writer.write(json_response(400, {"type": "error", "error": {
                "type": "invalid_request_error", "message": "frequency_penalty: Extra inputs are not permitted"}}))
        else:
            writer.write(_stream(ANTHROPIC_START, ANTHROPIC_BLOCK,
                                 b'event: message_stop\ndata: {"type":"message_stop"}\n\n'))

    sampling = {"temperature": 0, "frequency_penalty": 0, "top_k": 5}
    exchanges, server = run_with(handler, "anthropic", [ChatRequest(messages=USER, sampling=sampling)] * 2)
    first, second = exchanges
    assert first.ok and first.text == "Hel"
    assert first.rejected_params == ["temperature", "frequency_penalty"]
    assert first.request_body["top_k"] == 5 and "temperature" not in first.request_body
    assert any("temperature rejected" in f for f in first.findings)
    assert len(server.requests) == 4            # 3 for the first request, 1 for the second
    assert second.ok and second.rejected_params == ["temperature", "frequency_penalty"]
    assert any("rejected earlier" in f for f in second.findings)
    assert "frequency_penalty" not in server.requests[-1].json()


def test_openai_rejected_parameter_named_in_message():
    async def handler(request, writer, server):
        if "presence_penalty" in request.json():
            writer.write(json_response(400, {"error": {
                "message": "Unsupported parameter: 'presence_penalty' is not supported with this model.",
                "type": "invalid_request_error", "param": "presence_penalty"}}))
        else:
            writer.write(json_response(200, {"id": "c", "object": "chat.completion", "created": 1,
                                             "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
                                             "message": {"role": "assistant", "content": "ok"}}]}))

    [ex], server = run_with(handler, "openai", [ChatRequest(messages=USER, stream=False,
                                                            sampling={"presence_penalty": 0, "seed": 1})])
    assert ex.ok and ex.rejected_params == ["presence_penalty"]
    assert server.requests[-1].json()["seed"] == 1


def test_openai_switches_to_max_completion_tokens_when_max_tokens_is_refused():
    # The hosted API's refusal for newer models; older servers know only max_tokens.
    async def handler(request, writer, server):
        if "max_tokens" in request.json():
            writer.write(json_response(400, {"error": {
                "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                           "Use 'max_completion_tokens' instead.",
                "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}}))
        else:
            writer.write(json_response(200, {"id": "c", "object": "chat.completion", "created": 1,
                                             "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
                                             "message": {"role": "assistant", "content": "ok"}}]}))

    request = ChatRequest(messages=USER, stream=False, max_tokens=7, sampling={"temperature": 0})
    (first, second), server = run_with(handler, "openai", [request, request])
    assert first.ok and first.text == "ok" and first.rejected_params == []
    assert any(f.startswith("max_tokens rejected, resent as max_completion_tokens") for f in first.findings)
    assert first.request_body["max_completion_tokens"] == 7 and "max_tokens" not in first.request_body
    assert first.request_body["temperature"] == 0
    # Remembered: the next request goes out in the new shape at once.
    assert second.ok and not second.findings and len(server.requests) == 3


def test_openai_switches_max_tokens_at_most_once():
    async def handler(request, writer, server):
        writer.write(json_response(400, {"error": {"message": "Unsupported parameter: 'max_tokens' is not "
                                                              "supported. Use 'max_completion_tokens' instead.",
                                                   "type": "x"}}))

    [ex], server = run_with(handler, "openai", [ChatRequest(messages=USER, stream=False, max_tokens=9000)])
    # one switch is tried; the same refusal in the new shape is the answer, not a loop
    assert ex.error_type == "bad_request" and len(server.requests) == 2


def test_bad_request_not_naming_a_parameter_is_not_retried():
    async def handler(request, writer, server):
        writer.write(json_response(400, {"error": {"message": "messages: too long", "type": "x"}}))

    [ex], server = run_with(handler, "openai", [ChatRequest(messages=USER, sampling={"temperature": 0})])
    assert ex.error_type == "bad_request" and ex.rejected_params == [] and len(server.requests) == 1


def test_count_tokens_404_is_none():
    async def handler(request, writer, server):
        writer.write(json_response(404, {"error": {"message": "no route"}}))

    async def main():
        async with ScriptedServer(handler) as server:
            adapter = make_adapter(target("anthropic", server.url), server.url, None)
            result = await adapter.count_tokens(ChatRequest(messages=USER))
            await adapter.aclose()
            return result
    assert asyncio.run(main()) is None


def test_error_types_are_known():
    assert {"rate_limited", "overloaded", "server_error", "timeout", "connection", "protocol",
            "bad_request", "auth"} <= set(ERROR_TYPES)
