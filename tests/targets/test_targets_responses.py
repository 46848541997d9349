"""The OpenAI Responses adapter (protocol openai-responses): request bodies, streamed and plain
answers, reasoning and function-call deltas, usage, errors, unknown events and conformance
findings, against scripted loopback servers and through the pure decoder (each event's position
as its timestamp)."""

from __future__ import annotations

import asyncio
import json
import time
import typing

import pytest

from prober.core.config import TargetConfig
from prober.core.records import ChatRequest
from prober.run.retry import RETRYABLE
from prober.targets import make_adapter
from prober.targets.conformance import _responses_models, check_exchange
from prober.targets.responses import KNOWN_EVENTS, ResponsesAdapter
from tests.support.scripted_server import LAST_CHUNK, ScriptedServer, chunk, json_response, sse_head
from tests.targets.test_targets_samples import decode

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]
PROTOCOL = "openai-responses"
USER = [{"role": "user", "content": "hi"}]
USAGE = {"input_tokens": 40, "input_tokens_details": {"cached_tokens": 32, "cache_write_tokens": 0},
         "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 4}, "total_tokens": 49}


def response(status="completed", output=(), usage=None, **fields):
    """A Response object as the SDK types it (every required field, the optional ones the API sends)."""
    return {"id": "resp_1", "object": "response", "created_at": 1764720000, "status": status, "error": None,
            "incomplete_details": None, "instructions": None, "model": "gpt-x", "output": list(output),
            "parallel_tool_calls": True, "temperature": 1.0, "tool_choice": "auto", "tools": [], "top_p": 1.0,
            "usage": usage, **fields}


def message_item(text, status="completed"):
    content = [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}] if text is not None else []
    return {"id": "msg_1", "type": "message", "status": status, "role": "assistant", "content": content}


def reasoning_item(text=None):
    item = {"id": "rs_1", "type": "reasoning", "summary": []}
    if text is not None:
        item["content"] = [{"type": "reasoning_text", "text": text}]
    return item


def call_item(arguments="", status="completed"):
    return {"id": "fc_1", "type": "function_call", "status": status, "call_id": "call_1", "name": "lookup",
            "arguments": arguments}


class Stream:
    """Builds a stream's events with consecutive sequence numbers."""

    def __init__(self):
        self.events: list[tuple[str, dict]] = []

    def add(self, kind, **fields):
        self.events.append((kind, {"type": kind, "sequence_number": len(self.events), **fields}))
        return self

    def text_part(self, event, text, **extra):
        return self.add(event, item_id="msg_1", output_index=extra.pop("output_index", 1), content_index=0,
                        **extra, **({"delta": text} if event.endswith("delta") else {"text": text}))

    def raw(self) -> bytes:
        return b"".join(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode() for kind, data in self.events)

    def http(self) -> bytes:
        return sse_head() + b"".join(chunk(f"event: {k}\ndata: {json.dumps(d)}\n\n".encode())
                                     for k, d in self.events) + LAST_CHUNK


def reasoning_then_answer(usage=USAGE) -> Stream:
    """Reasoning first (an empty summary delta, then reasoning text), then the answer "Hello"."""
    s = Stream()
    s.add("response.created", response=response("in_progress"))
    s.add("response.in_progress", response=response("in_progress"))
    s.add("response.output_item.added", output_index=0, item={**reasoning_item(), "summary": []})
    s.add("response.reasoning_summary_text.delta", item_id="rs_1", output_index=0, summary_index=0, delta="")
    s.add("response.reasoning_text.delta", item_id="rs_1", output_index=0, content_index=0, delta="think")
    s.add("response.reasoning_text.done", item_id="rs_1", output_index=0, content_index=0, text="think")
    s.add("response.output_item.done", output_index=0, item=reasoning_item("think"))
    s.add("response.output_item.added", output_index=1, item=message_item(None, "in_progress"))
    s.add("response.content_part.added", item_id="msg_1", output_index=1, content_index=0,
          part={"type": "output_text", "annotations": [], "logprobs": [], "text": ""})
    s.text_part("response.output_text.delta", "", logprobs=[])
    s.text_part("response.output_text.delta", "Hel", logprobs=[])
    s.text_part("response.output_text.delta", "lo", logprobs=[])
    s.text_part("response.output_text.done", "Hello", logprobs=[])
    s.add("response.content_part.done", item_id="msg_1", output_index=1, content_index=0,
          part={"type": "output_text", "annotations": [], "logprobs": [], "text": "Hello"})
    s.add("response.output_item.done", output_index=1, item=message_item("Hello"))
    s.add("response.completed", response=response(output=[reasoning_item("think"), message_item("Hello")],
                                                  usage=usage))
    return s


def function_call_stream() -> Stream:
    s = Stream()
    s.add("response.created", response=response("in_progress"))
    s.add("response.output_item.added", output_index=0, item=call_item("", "in_progress"))
    s.add("response.function_call_arguments.delta", item_id="fc_1", output_index=0, delta="")
    s.add("response.function_call_arguments.delta", item_id="fc_1", output_index=0, delta='{"q": ')
    s.add("response.function_call_arguments.delta", item_id="fc_1", output_index=0, delta='"x"}')
    s.add("response.function_call_arguments.done", item_id="fc_1", output_index=0, arguments='{"q": "x"}')
    s.add("response.output_item.done", output_index=0, item=call_item('{"q": "x"}'))
    s.add("response.completed", response=response(output=[call_item('{"q": "x"}')], usage=USAGE))
    return s


def position(stream: Stream, kind: str, delta: str) -> int:
    """The position (the pure decoder's timestamp) of the first `kind` event with this delta."""
    return next(i for i, (k, d) in enumerate(stream.events) if k == kind and d.get("delta") == delta)


def send_all(handler, requests):
    async def main():
        async with ScriptedServer(handler) as server:
            target = TargetConfig(protocol=PROTOCOL, base_url=server.url, model="m", name="t")
            adapter = make_adapter(target, server.url, "sk-test-key")
            exchanges = [await adapter.send(request) for request in requests]
            await adapter.aclose()
            return exchanges, server
    return asyncio.run(main())


# --- the request -----------------------------------------------------------------------------------

def test_body_carries_instructions_input_tools_and_text_format():
    adapter = ResponsesAdapter(TargetConfig(protocol=PROTOCOL, base_url="http://h", model="gpt-x", name="t"),
                               "http://h", None)
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    request = ChatRequest(
        messages=[{"role": "user", "content": [{"type": "text", "text": "one"}]},
                  {"role": "assistant", "content": [{"type": "text", "text": "two"}]},
                  {"role": "user", "content": "three"}],
        system=[{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        max_tokens=33, sampling={"temperature": 0.0, "top_p": 0.5},
        tools=[{"name": "lookup", "description": "d", "input_schema": schema}],
        tool_choice={"type": "tool", "name": "lookup"},
        json_schema={"name": "answer", "schema": schema, "strict": True}, extra={"prompt_cache_key": "k"})
    body, notes = adapter.build_body(request)
    assert notes == []
    assert body == {
        "model": "gpt-x", "max_output_tokens": 33, "instructions": "be brief",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "one"}]},
                  {"role": "assistant", "content": [{"type": "output_text", "text": "two"}]},
                  {"role": "user", "content": "three"}],
        "temperature": 0.0, "top_p": 0.5,
        "tools": [{"type": "function", "name": "lookup", "description": "d", "parameters": schema, "strict": False}],
        "tool_choice": {"type": "function", "name": "lookup"},
        "text": {"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}},
        "store": False, "stream": True, "prompt_cache_key": "k"}
    # a chat-completions tool and choice are converted too; json_object has its own format
    chat_tool = {"type": "function", "function": {"name": "f", "parameters": schema, "strict": True}}
    body, _ = adapter.build_body(ChatRequest(messages=USER, tools=[chat_tool], json_object=True, stream=False,
                                             tool_choice={"type": "function", "function": {"name": "f"}}))
    assert body["tools"] == [{"type": "function", "name": "f", "parameters": schema, "strict": True}]
    assert body["tool_choice"] == {"type": "function", "name": "f"}
    assert body["text"] == {"format": {"type": "json_object"}} and body["stream"] is False
    # the body the probes build is one the SDK's request type accepts
    from openai.types.responses.response_create_params import ResponseCreateParamsBase
    assert set(body) <= set(typing.get_type_hints(ResponseCreateParamsBase)) | {"stream"}


def test_known_events_are_exactly_the_sdk_stream_union():
    sdk_events = set(_responses_models()) - {"(body)"}
    assert sdk_events == KNOWN_EVENTS


# --- streamed answers ------------------------------------------------------------------------------

def test_reasoning_then_answer_ttft_first_answer_itl_and_usage():
    stream = reasoning_then_answer()
    ex = decode(PROTOCOL, stream.raw(), 61)
    assert ex.ok and ex.text == "Hello" and ex.extra["reasoning"] == "think"
    # TTFT at the first non-empty delta of any channel (the empty summary delta does not count),
    # the answer's first token at the first non-empty output_text delta
    assert ex.first_token_ns == position(stream, "response.reasoning_text.delta", "think")
    assert ex.first_answer_ns == position(stream, "response.output_text.delta", "Hel")
    assert ex.chunk_ns == [ex.first_token_ns, ex.first_answer_ns, ex.first_answer_ns + 1]
    assert ex.chunk_chars == [5, 3, 2]
    assert ex.usage == {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49,
                        "prompt_tokens_details": {"cached_tokens": 32, "cache_write_tokens": 0},
                        "completion_tokens_details": {"reasoning_tokens": 4}}
    assert (ex.request_id, ex.response_model, ex.finish_reason) == ("resp_1", "gpt-x", "completed")
    assert check_exchange(ex) == []


def test_an_answer_without_reasoning_starts_both_clocks_at_its_first_token():
    stream = reasoning_then_answer()
    stream.events = [e for e in stream.events if "reasoning" not in e[0] and e[1].get("output_index") != 0]
    ex = decode(PROTOCOL, stream.raw(), 61)
    assert ex.text == "Hello" and "reasoning" not in ex.extra
    assert ex.first_token_ns == ex.first_answer_ns == position(stream, "response.output_text.delta", "Hel")


def test_function_call_arguments_deltas_are_content_and_the_answer():
    stream = function_call_stream()
    ex = decode(PROTOCOL, stream.raw(), 61)
    assert ex.ok and ex.text == ""
    assert ex.tool_calls == [{"type": "function", "id": "call_1", "name": "lookup", "input": {"q": "x"}}]
    # the empty arguments delta is not the first token
    assert ex.first_token_ns == ex.first_answer_ns == position(stream, "response.function_call_arguments.delta",
                                                               '{"q": ')
    assert ex.chunk_chars == [6, 4]
    assert check_exchange(ex) == []


def test_absent_usage_fields_stay_absent():
    partial = {"input_tokens": 5, "output_tokens": 2}
    ex = decode(PROTOCOL, reasoning_then_answer(usage=partial).raw(), 61)
    assert ex.usage == {"prompt_tokens": 5, "completion_tokens": 2}
    # ...and the SDK's types require the rest: strict conformance says which
    assert check_exchange(ex) == [
        "openai-responses response.completed #15: response.usage.input_tokens_details: Field required",
        "openai-responses response.completed #15: response.usage.output_tokens_details: Field required",
        "openai-responses response.completed #15: response.usage.total_tokens: Field required"]
    none = decode(PROTOCOL, reasoning_then_answer(usage=None).raw(), 61)
    assert none.usage is None
    assert check_exchange(none) == ["openai-responses response.completed #15: no usage"]


def test_streamed_answer_end_to_end_with_timing_and_auth():
    gap_s = 0.15

    async def handler(request, writer, server):
        stream = reasoning_then_answer()
        first_answer = position(stream, "response.output_text.delta", "Hel")
        writer.write(sse_head())
        for i, (kind, data) in enumerate(stream.events):
            if i == first_answer:
                await writer.drain()
                await asyncio.sleep(gap_s)       # the model "thinks" after its reasoning token
            writer.write(chunk(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()))
        writer.write(LAST_CHUNK)

    started = time.perf_counter()
    (ex,), server = send_all(handler, [ChatRequest(messages=USER)])
    elapsed = time.perf_counter() - started
    assert ex.ok and ex.text == "Hello" and ex.status == 200
    assert server.requests[0].path == "/v1/responses"
    assert server.requests[0].headers["authorization"] == "Bearer sk-test-key"
    assert ex.request_headers["authorization"] == "[redacted]"
    assert ex.first_token_ns < ex.first_answer_ns <= ex.end_ns
    # the answer's first token waited for the server's pause; the whole exchange bounds it above
    assert gap_s * 0.9 <= (ex.first_answer_ns - ex.first_token_ns) / 1e9 <= elapsed
    assert ex.usage["prompt_tokens_details"]["cached_tokens"] == 32
    assert check_exchange(ex) == []


def test_plain_response_body():
    body = response(output=[reasoning_item("mull"), message_item("Answer"), call_item('{"q": 1}')], usage=USAGE,
                    service_tier="default")

    async def handler(request, writer, server):
        writer.write(json_response(200, body))

    (ex,), _ = send_all(handler, [ChatRequest(messages=USER, stream=False)])
    assert ex.ok and ex.text == "Answer" and ex.extra["reasoning"] == "mull"
    assert ex.tool_calls == [{"type": "function", "id": "call_1", "name": "lookup", "input": {"q": 1}}]
    assert ex.usage["prompt_tokens"] == 40 and ex.usage["completion_tokens_details"] == {"reasoning_tokens": 4}
    assert (ex.service_tier, ex.finish_reason, ex.first_token_ns) == ("default", "completed", None)
    assert check_exchange(ex) == []
    # a cut answer says why
    body = response("incomplete", output=[message_item("Ans", "incomplete")], usage=USAGE,
                    incomplete_details={"reason": "max_output_tokens"})

    async def incomplete(request, writer, server):
        writer.write(json_response(200, body))

    (cut,), _ = send_all(incomplete, [ChatRequest(messages=USER, stream=False)])
    assert cut.ok and cut.finish_reason == "max_output_tokens" and check_exchange(cut) == []


# --- errors ----------------------------------------------------------------------------------------

def failing_stream(kind: str, **fields) -> Stream:
    s = Stream()
    s.add("response.created", response=response("in_progress"))
    s.add("response.output_item.added", output_index=1, item=message_item(None, "in_progress"))
    s.text_part("response.output_text.delta", "Hel", logprobs=[])
    return s.add(kind, **fields)


@pytest.mark.parametrize("kind, fields, error_type", [
    ("error", {"code": "rate_limit_exceeded", "message": "slow down", "param": None}, "rate_limited"),
    ("error", {"code": "server_is_overloaded", "message": "busy", "param": None}, "overloaded"),
    ("error", {"code": None, "message": "broke", "param": None}, "server_error"),
    ("response.failed", {"response": response("failed", error={"code": "server_error", "message": "broke"})},
     "server_error"),
    ("response.failed", {"response": response("failed", error={"code": "rate_limit_exceeded",
                                                               "message": "slow down"})}, "rate_limited"),
])
def test_error_events_after_200_are_classified_and_retryable(kind, fields, error_type):
    ex = decode(PROTOCOL, failing_stream(kind, **fields).raw(), 61)
    assert ex.error_type == error_type and error_type in RETRYABLE
    message = fields.get("message") or fields["response"]["error"]["message"]
    assert ex.error_message.startswith("error event after HTTP 200") and message in ex.error_message
    assert ex.text == "Hel"
    # no missing-terminal finding after the server's own error
    assert check_exchange(ex) == []


@pytest.mark.parametrize("status, expected", [(429, "rate_limited"), (503, "overloaded"), (500, "server_error"),
                                              (400, "bad_request"), (401, "auth")])
def test_http_errors(status, expected):
    async def handler(request, writer, server):
        writer.write(json_response(status, {"error": {"message": "nope", "type": "invalid_request_error",
                                                      "param": None, "code": None}}))

    (ex,), _ = send_all(handler, [ChatRequest(messages=USER)])
    assert (ex.status, ex.error_type) == (status, expected) and "nope" in ex.error_message
    assert check_exchange(ex) == []


def test_an_error_body_without_an_error_object_is_a_finding():
    async def handler(request, writer, server):
        writer.write(json_response(500, {"detail": "boom"}))

    (ex,), _ = send_all(handler, [ChatRequest(messages=USER)])
    assert ex.error_type == "server_error" and ex.error_message == "500: boom"
    assert check_exchange(ex) == ["openai-responses error body (HTTP 500): no error object"]


def test_a_rejected_parameter_is_dropped_and_resent():
    async def handler(request, writer, server):
        if "temperature" in request.json():
            writer.write(json_response(400, {"error": {"message": "Unsupported parameter: 'temperature' is not "
                                                                  "supported with this model.",
                                                       "type": "invalid_request_error", "param": "temperature",
                                                       "code": "unsupported_parameter"}}))
        else:
            writer.write(json_response(200, response(output=[message_item("ok")], usage=USAGE)))

    (ex,), server = send_all(handler, [ChatRequest(messages=USER, stream=False, sampling={"temperature": 0.0})])
    assert ex.ok and ex.text == "ok" and ex.rejected_params == ["temperature"]
    assert len(server.requests) == 2 and "temperature" not in server.requests[1].json()


def test_a_stream_cut_before_its_terminal_event_is_a_protocol_error_and_a_finding():
    stream = reasoning_then_answer()
    stream.events = stream.events[:-1]
    ex = decode(PROTOCOL, stream.raw(), 61)
    assert ex.error_type == "protocol" and ex.text == "Hello"
    assert check_exchange(ex) == ["openai-responses stream without response.completed"]


# --- unknown events and conformance findings --------------------------------------------------------

def test_an_unknown_event_type_is_a_notice_not_a_finding():
    stream = reasoning_then_answer()
    stream.events.insert(3, ("response.hologram.delta", {"type": "response.hologram.delta", "sequence_number": 3}))
    for i, (_, data) in enumerate(stream.events):
        data["sequence_number"] = i
    ex = decode(PROTOCOL, stream.raw(), 61)
    assert ex.ok and ex.text == "Hello"
    assert ex.extra["notices"] == ["unknown event type 'response.hologram.delta' ignored"]
    assert check_exchange(ex) == []


def test_conformance_findings_name_the_event_and_the_fault():
    stream = reasoning_then_answer()
    at = position(stream, "response.output_text.delta", "lo")
    stream.events[at][1]["delta"] = 5                                   # not a string
    stream.events[at + 1][1]["sequence_number"] = 99                    # out of order
    del stream.events[0][1]["response"]["tools"]                        # a required field
    raw = stream.raw().replace(b"event: response.in_progress\n", b"event: response.progress\n", 1)
    ex = decode(PROTOCOL, raw, 61)
    assert check_exchange(ex) == [
        "openai-responses response.created #0: response.tools: Field required",
        "openai-responses response.in_progress #1: SSE event name 'response.progress' but data.type "
        "'response.in_progress'",
        f"openai-responses response.output_text.delta #{at}: delta: Input should be a valid string",
        f"openai-responses response.output_text.done #{at + 1}: sequence_number 99, expected {at + 1}",
        f"openai-responses response.content_part.done #{at + 2}: sequence_number {at + 2}, expected 100"]


def test_order_findings_events_before_created_and_for_items_never_added():
    stream = reasoning_then_answer()
    stream.events.pop(0)
    stream.events = [e for e in stream.events if not (e[0] == "response.output_item.added"
                                                      and e[1]["item"]["type"] == "message")]
    for i, (_, data) in enumerate(stream.events):
        data["sequence_number"] = i
    ex = decode(PROTOCOL, stream.raw(), 61)
    findings = check_exchange(ex)
    assert findings[0] == "openai-responses response.in_progress #0: before response.created"
    assert "openai-responses response.content_part.added #6: for item 'msg_1' that is not open" in findings
    assert "openai-responses response.output_item.done #12: item 'msg_1' done but never added" in findings


# --- llama-server's shape (tools/server/server-task.cpp, to_json_oaicompat_resp*) ---------------------

def llama_server_stream(text_pieces=("Hel", "lo"), cached=12) -> bytes:
    """A stream exactly as llama-server writes it: named events, no sequence_number, output_index or
    logprobs, a bare Response in response.created, usage without output_tokens_details."""
    def event(kind, **fields):
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields}, separators=(',', ':'))}\n\n"
    stub = {"id": "resp_x", "object": "response", "status": "in_progress"}
    out = event("response.created", response=stub) + event("response.in_progress", response=stub)
    out += event("response.output_item.added", item={"content": [], "id": "msg_x", "role": "assistant",
                                                     "status": "in_progress", "type": "message"})
    out += event("response.content_part.added", item_id="msg_x", part={"type": "output_text", "text": ""})
    for piece in text_pieces:
        out += event("response.output_text.delta", item_id="msg_x", delta=piece)
    text = "".join(text_pieces)
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
    item = {"type": "message", "status": "completed", "id": "msg_x", "content": [part], "role": "assistant"}
    out += event("response.output_text.done", item_id="msg_x", text=text)
    out += event("response.content_part.done", item_id="msg_x", part=part)
    out += event("response.output_item.done", item=item)
    usage = {"input_tokens": 20, "output_tokens": len(text_pieces), "total_tokens": 20 + len(text_pieces),
             "input_tokens_details": {"cached_tokens": cached}}
    out += event("response.completed", response={"id": "resp_x", "object": "response", "created_at": 1,
                                                 "status": "completed", "model": "smol", "output": [item],
                                                 "usage": usage}, timings={"prompt_n": 8, "cache_n": cached})
    return out.encode()


# What strict conformance says about llama-server's stream, each one true (the source writes none of
# these fields): at most three per event, a fault shared by the deltas counted once; nothing about
# order, items, usage presence or timing. (The terminal usage's missing output_tokens_details and
# cache_write_tokens are past its event's three.)
LLAMA_SERVER_FINDINGS = [
    "openai-responses response.created #0: response.created_at: Field required",
    "openai-responses response.created #0: response.model: Field required",
    "openai-responses response.created #0: response.output: Field required",
    "openai-responses response.in_progress #1: response.created_at: Field required",
    "openai-responses response.in_progress #1: response.model: Field required",
    "openai-responses response.in_progress #1: response.output: Field required",
    "openai-responses response.output_item.added #2: output_index: Field required",
    "openai-responses response.output_item.added #2: sequence_number: Field required",
    "openai-responses response.content_part.added #3: content_index: Field required",
    "openai-responses response.content_part.added #3: output_index: Field required",
    "openai-responses response.content_part.added #3: part.annotations: Field required",
    "openai-responses response.output_text.delta #4: content_index: Field required (and 1 more event like it)",
    "openai-responses response.output_text.delta #4: logprobs: Field required (and 1 more event like it)",
    "openai-responses response.output_text.delta #4: output_index: Field required (and 1 more event like it)",
    "openai-responses response.output_text.done #6: content_index: Field required",
    "openai-responses response.output_text.done #6: logprobs: Field required",
    "openai-responses response.output_text.done #6: output_index: Field required",
    "openai-responses response.content_part.done #7: content_index: Field required",
    "openai-responses response.content_part.done #7: output_index: Field required",
    "openai-responses response.content_part.done #7: sequence_number: Field required",
    "openai-responses response.output_item.done #8: output_index: Field required",
    "openai-responses response.output_item.done #8: sequence_number: Field required",
    "openai-responses response.completed #9: response.parallel_tool_calls: Field required",
    "openai-responses response.completed #9: response.tool_choice: Field required",
    "openai-responses response.completed #9: response.tools: Field required",
]


def test_llama_server_stream_is_read_whole_and_its_deviations_are_named():
    ex = decode(PROTOCOL, llama_server_stream(), 61)
    assert ex.ok and ex.text == "Hello" and ex.finish_reason == "completed"
    assert ex.usage == {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22,
                        "prompt_tokens_details": {"cached_tokens": 12}}
    assert ex.first_token_ns == ex.first_answer_ns == 4 and ex.chunk_ns == [4, 5]
    assert check_exchange(ex) == LLAMA_SERVER_FINDINGS


def test_llama_server_stream_error_is_kept_with_its_class():
    raw = llama_server_stream().split(b"event: response.output_text.done")[0]
    raw += b'data: {"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}\n\n'
    ex = decode(PROTOCOL, raw, 61)
    assert ex.error_type == "overloaded" and "Loading model" in ex.error_message and ex.text == "Hello"
    findings = check_exchange(ex)
    assert not [f for f in findings if "without response.completed" in f or "error" in f], findings
