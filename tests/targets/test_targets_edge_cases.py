"""Protocol edge cases a wire-level audit of both adapters found (issue 11, item 7), each against a
small hostile loopback server or the recorded wire samples."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import time
import zlib

import pytest
from asyncio_throttle import Throttler
from rich.console import Console

from prober.core.config import Budget, RunnerConfig, TargetConfig
from prober.core.records import ChatRequest, Exchange
from prober.probes.latency import LatencyParams, LatencyProbe
from prober.run.budget import RunBudget
from prober.run.progress import RunProgress
from prober.run.session import TargetGate, TargetSession
from prober.targets import make_adapter
from prober.targets.conformance import check_exchange
from tests.support.scripted_server import (
    LAST_CHUNK,
    ScriptedServer,
    chunk,
    json_response,
    response_bytes,
    sse_head,
)
from tests.targets.test_targets_samples import INCLUDE_USAGE, WIRE_SAMPLES, _events, _rebuild, decode

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]
USER = [{"role": "user", "content": "hi"}]


def send_all(handler, protocol: str, requests: list[ChatRequest]) -> tuple[list[Exchange], ScriptedServer]:
    async def main():
        async with ScriptedServer(handler) as server:
            target = TargetConfig(protocol=protocol, base_url=server.url, model="m", name="t")
            adapter = make_adapter(target, server.url, None)
            exchanges = [await adapter.send(request) for request in requests]
            await adapter.aclose()
            return exchanges, server
    return asyncio.run(main())


def sse(*events: bytes, headers=None) -> bytes:
    return sse_head(headers=headers) + b"".join(chunk(e) for e in events) + LAST_CHUNK


def openai_chunk(**fields) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-x", **fields}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


# --- a new Anthropic event type is a notice ---------------------------------------------------------

def test_new_anthropic_event_type_is_a_notice_not_non_conformance():
    events = _events("anthropic-messages-stream-basic.sse")
    events.insert(2, ("content_block_citation_preview", json.dumps({"type": "content_block_citation_preview",
                                                                     "index": 0})))
    plain = decode("anthropic", _rebuild(_events("anthropic-messages-stream-basic.sse")), 4096)
    ex = decode("anthropic", _rebuild(events), 4096)
    assert ex.ok and ex.text == plain.text and ex.usage == plain.usage
    assert check_exchange(ex) == []
    assert ex.extra["notices"] == ["unknown event type 'content_block_citation_preview' ignored"]
    # ...while a known event with a wrong shape still is a finding
    events[4] = ("content_block_delta", json.dumps({"type": "content_block_delta", "index": 0,
                                                    "delta": {"type": "text_delta", "text": 5}}))
    assert check_exchange(decode("anthropic", _rebuild(events), 4096)) != []


# --- service_tier ------------------------------------------------------------------------------------

def test_service_tier_is_recorded_on_both_protocols_and_is_a_metric_label():
    async def openai(request, writer, server):
        if request.json()["stream"]:
            writer.write(sse(openai_chunk(service_tier="flex", choices=[{"index": 0, "delta": {"content": "a"},
                                                                          "finish_reason": "stop"}]),
                             openai_chunk(service_tier="flex", choices=[], usage={
                                 "prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}),
                             b"data: [DONE]\n\n"))
        else:
            writer.write(json_response(200, {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                                             "service_tier": "priority", "choices": [{"index": 0,
                                             "finish_reason": "stop", "message": {"role": "assistant",
                                                                                  "content": "b"}}]}))

    (streamed, plain), _ = send_all(openai, "openai", [ChatRequest(messages=USER),
                                                       ChatRequest(messages=USER, stream=False)])
    assert (streamed.service_tier, plain.service_tier) == ("flex", "priority")
    # Anthropic reports it in usage: the recorded tool-use stream says "standard"
    anthropic = decode("anthropic", (WIRE_SAMPLES / "anthropic-messages-stream-tool-use.sse").read_bytes(), 64)
    assert anthropic.service_tier == "standard"

    rows = [{"probe": "latency", "final": True, "labels": {"concurrency": 1, "phase": "measure"},
             "ttft_ms": 10.0, "end_ms": 20.0, "headers_ms": 5.0, "chunk_offsets_ms": [10.0],
             "usage": {"output_tokens": 1}, "service_tier": tier, "started_at": None}
            for tier in ("standard", "standard", "priority", None)]
    metrics = LatencyProbe().summarize(rows, LatencyParams(), run_id="r", target="t")
    tiers = {m.labels["service_tier"]: m.value for m in metrics if m.name == "service_tier_requests"}
    assert tiers == {"standard": 2.0, "priority": 1.0}


# --- strict conformance, and the budget --------------------------------------------------------------

@pytest.mark.parametrize("value", ["14", 14.0, True])
def test_token_counts_of_the_wrong_type_are_findings(value):
    events = _events("openai-chat-stream-include-usage.sse")
    usage_at = next(i for i, (_, data) in enumerate(events) if '"usage":{' in data.replace(" ", ""))
    body = json.loads(events[usage_at][1])
    body["usage"]["prompt_tokens"] = value
    events[usage_at] = (None, json.dumps(body))
    ex = decode("openai", _rebuild(events), 4096, INCLUDE_USAGE)
    assert ex.ok and ex.usage["prompt_tokens"] == value          # stored as the wire said
    assert check_exchange(ex) == [f"openai chunk #{usage_at}: usage.prompt_tokens: Input should be a valid integer"]
    # the same on Anthropic's message_delta usage
    anthropic = _events("anthropic-messages-stream-basic.sse")
    delta_at = next(i for i, (name, _) in enumerate(anthropic) if name == "message_delta")
    body = json.loads(anthropic[delta_at][1])
    body["usage"]["output_tokens"] = value
    anthropic[delta_at] = ("message_delta", json.dumps(body))
    findings = check_exchange(decode("anthropic", _rebuild(anthropic), 4096))
    assert findings == [f"anthropic message_delta #{delta_at}: usage.output_tokens: Input should be a valid integer"]


def test_budget_never_counts_wrongly_typed_tokens_as_zero_silently():
    budget = RunBudget(Budget())
    spelled = Exchange(protocol="openai", url="u", request_body={}, request_headers={}, started_at=None,
                       start_ns=0, usage={"prompt_tokens": "20", "completion_tokens": 3.0, "total_tokens": 23})
    budget.record(spelled)
    assert budget.tokens == 23 and spelled.findings == []
    unreadable = Exchange(protocol="anthropic", url="u", request_body={}, request_headers={}, started_at=None,
                          start_ns=0, usage={"input_tokens": True, "output_tokens": 2.5,
                                             "cache_read_input_tokens": None})
    budget.record(unreadable)
    assert budget.tokens == 23
    assert unreadable.findings == [
        "usage.input_tokens = True is not a token count: not charged to the budget",
        "usage.output_tokens = 2.5 is not a token count: not charged to the budget"]


# --- Azure's first chunk ------------------------------------------------------------------------------

def test_azure_prompt_filter_first_chunk_does_not_blank_model_and_id():
    azure_first = (b'data: {"choices":[],"created":0,"id":"","model":"","object":"",'
                   b'"prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}\n\n')

    async def handler(request, writer, server):
        writer.write(sse(azure_first,
                         openai_chunk(id="chatcmpl-az1", model="gpt-4o-2024-08-06",
                                      choices=[{"index": 0, "delta": {"role": "assistant", "content": "hi"},
                                                "finish_reason": None}]),
                         openai_chunk(id="chatcmpl-az1", model="gpt-4o-2024-08-06",
                                      choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]),
                         b"data: [DONE]\n\n"))

    [ex], _ = send_all(handler, "openai", [ChatRequest(messages=USER)])
    assert ex.ok and ex.text == "hi"
    assert (ex.response_model, ex.request_id) == ("gpt-4o-2024-08-06", "chatcmpl-az1")


# --- max_tokens vs max_completion_tokens; resends are attempts ----------------------------------------

VLLM_TOO_LARGE = ("'max_tokens' or 'max_completion_tokens' is too large: 9000. This model's maximum context "
                  "length is 2048 tokens and your request has 12 input tokens (9000 > 2048 - 12). None")


def test_vllm_context_length_error_does_not_switch_the_field():
    async def handler(request, writer, server):
        writer.write(json_response(400, {"object": "error", "message": VLLM_TOO_LARGE,
                                         "type": "BadRequestError", "param": None, "code": 400}))

    [ex], server = send_all(handler, "openai", [ChatRequest(messages=USER, max_tokens=9000)])
    assert ex.error_type == "bad_request" and len(server.requests) == 1
    assert "max_tokens" in server.requests[0].json() and not ex.findings


def test_every_resend_is_a_stored_attempt_charged_to_budget_and_rate_limit():
    async def handler(request, writer, server):
        body = request.json()
        if "temperature" in body:
            writer.write(json_response(400, {"error": {"message": "Unsupported parameter: 'temperature'",
                                                       "type": "invalid_request_error"}}))
        elif "max_tokens" in body:
            writer.write(json_response(400, {"error": {
                "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                           "Use 'max_completion_tokens' instead.", "type": "invalid_request_error"}}))
        else:
            writer.write(json_response(200, {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                                             "usage": {"prompt_tokens": 5, "completion_tokens": 1,
                                                       "total_tokens": 6},
                                             "choices": [{"index": 0, "finish_reason": "stop",
                                                          "message": {"role": "assistant", "content": "ok"}}]}))

    class SampleRecorder:
        def __init__(self):
            self.samples = []

        def put(self, sample):
            self.samples.append(sample)

    async def main():
        async with ScriptedServer(handler) as server:
            target = TargetConfig(protocol="openai", base_url=server.url, model="m", name="t")
            # One request per 0.25 s: three attempts on the wire cannot take less than 0.5 s.
            throttler = Throttler(rate_limit=1, period=0.25)
            writer = SampleRecorder()
            budget = RunBudget(Budget())
            session = TargetSession(run_id="r", target=target, adapter=make_adapter(target, server.url, None),
                                    gate=TargetGate(asyncio.Semaphore(1), throttler), probe_name="p",
                                    budget=budget, writer=writer, settings=RunnerConfig(),
                                    progress=RunProgress(Console(), enabled=False),
                                    request_counter=itertools.count())
            t0 = time.monotonic()
            final = await session.send(ChatRequest(messages=USER, stream=False, sampling={"temperature": 0}),
                                       case="c", labels={})
            elapsed = time.monotonic() - t0
            await session.adapter.aclose()
            return final, writer.samples, budget, elapsed, server

    final, samples, budget, elapsed, server = asyncio.run(main())
    assert final.ok and final.text == "ok"
    assert len(server.requests) == 3
    assert [(s.exchange.attempt, s.final, s.exchange.status) for s in samples] == \
        [(1, False, 400), (2, False, 400), (3, True, 200)]
    assert samples[0].exchange.findings == ["parameter temperature rejected: resent without it"]
    assert samples[1].exchange.findings[0].startswith("max_tokens rejected, resent as max_completion_tokens")
    assert budget.requests == 3 and budget.tokens == 6 and elapsed >= 0.5


def test_a_spent_budget_stops_the_resend_and_keeps_the_refusal_as_final():
    from prober.run.budget import BudgetExhausted

    async def handler(request, writer, server):
        writer.write(json_response(400, {"error": {"message": "Unsupported parameter: 'temperature'",
                                                   "type": "invalid_request_error"}}))

    async def main():
        async with ScriptedServer(handler) as server:
            target = TargetConfig(protocol="openai", base_url=server.url, model="m", name="t")
            samples = []
            writer = type("SampleRecorder", (), {"put": lambda self, s: samples.append(s)})()
            session = TargetSession(run_id="r", target=target, adapter=make_adapter(target, server.url, None),
                                    gate=TargetGate(asyncio.Semaphore(1), None), probe_name="p",
                                    budget=RunBudget(Budget(max_requests=1)), writer=writer, settings=RunnerConfig(),
                                    progress=RunProgress(Console(), enabled=False), request_counter=itertools.count())
            with pytest.raises(BudgetExhausted):
                await session.send(ChatRequest(messages=USER, sampling={"temperature": 0}), case="c", labels={})
            await session.adapter.aclose()
            return samples, server

    samples, server = asyncio.run(main())
    assert len(server.requests) == 1
    assert [(s.exchange.attempt, s.final, s.exchange.status) for s in samples] == [(1, True, 400)]


# --- Accept-Encoding ----------------------------------------------------------------------------------

OPENAI_BODY = {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
               "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "zip"}}]}


@pytest.mark.parametrize("encoding, compress", [("gzip", gzip.compress), ("deflate", zlib.compress)])
def test_identity_is_asked_and_a_compressed_answer_is_decoded(encoding, compress):
    events = [openai_chunk(choices=[{"index": 0, "delta": {"content": word}, "finish_reason": None}])
              for word in ("a", "b", "c")] + [b"data: [DONE]\n\n"]

    async def handler(request, writer, server):
        if request.json()["stream"]:
            # one compressor across the stream, flushed per event, as a compressing proxy does
            packer = zlib.compressobj(wbits=31 if encoding == "gzip" else 15)
            pieces = [packer.compress(e) + packer.flush(zlib.Z_SYNC_FLUSH) for e in events]
            pieces[-1] += packer.flush()
            writer.write(sse_head(headers={"Content-Encoding": encoding}) + b"".join(chunk(p) for p in pieces)
                         + LAST_CHUNK)
        else:
            writer.write(response_bytes(200, compress(json.dumps(OPENAI_BODY).encode()),
                                        {"Content-Type": "application/json", "Content-Encoding": encoding}))

    (streamed, plain), server = send_all(handler, "openai", [ChatRequest(messages=USER),
                                                             ChatRequest(messages=USER, stream=False)])
    assert all(r.headers["accept-encoding"] == "identity" for r in server.requests)
    assert streamed.ok and streamed.text == "abc" and len(streamed.chunk_ns) == 3
    assert plain.ok and plain.text == "zip"


def test_an_undecodable_content_encoding_is_named_in_the_error():
    async def handler(request, writer, server):
        writer.write(response_bytes(200, b"\x1b\x00\x00", {"Content-Type": "application/json",
                                                           "Content-Encoding": "br"}))

    [ex], _ = send_all(handler, "openai", [ChatRequest(messages=USER, stream=False)])
    assert ex.error_type == "protocol"
    assert "Content-Encoding 'br'" in ex.error_message and "identity" in ex.error_message


# --- tool-call deltas without index; zero-length deltas -----------------------------------------------

def test_tool_call_deltas_without_index_make_one_call_per_id():
    def tool_delta(**call) -> bytes:
        return openai_chunk(choices=[{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}])

    async def handler(request, writer, server):
        writer.write(sse(tool_delta(id="call_1", type="function", function={"name": "get", "arguments": ""}),
                         tool_delta(function={"arguments": '{"city":'}),
                         tool_delta(function={"arguments": '"Paris"}'}),
                         tool_delta(id="call_2", type="function", function={"name": "put", "arguments": "{}"}),
                         tool_delta(function={}),                       # empty: not a content chunk
                         openai_chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]),
                         b"data: [DONE]\n\n"))

    [ex], _ = send_all(handler, "openai", [ChatRequest(messages=USER)])
    assert ex.ok
    assert ex.tool_calls == [{"type": "function", "id": "call_1", "name": "get", "input": {"city": "Paris"}},
                             {"type": "function", "id": "call_2", "name": "put", "input": {}}]
    # The delta that only names the function is no content chunk: the call's first token is its
    # first argument text, as on Anthropic (docs/measurements-definitions.md).
    assert ex.chunk_chars == [8, 8, 2]


def test_zero_length_anthropic_deltas_are_not_content_chunks():
    start = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
             b'"role":"assistant","content":[],"model":"m","stop_reason":null,"stop_sequence":null,'
             b'"usage":{"input_tokens":5,"output_tokens":1}}}\n\n')

    def event(name: str, **data) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

    async def handler(request, writer, server):
        writer.write(sse(start,
                         event("content_block_start", index=0, content_block={"type": "thinking", "thinking": "",
                                                                              "signature": ""}),
                         event("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "hm"}),
                         event("content_block_delta", index=0, delta={"type": "signature_delta",
                                                                      "signature": "EqQBCgIYAhIM"}),
                         event("content_block_stop", index=0),
                         event("content_block_start", index=1, content_block={"type": "tool_use", "id": "toolu_1",
                                                                              "name": "get", "input": {}}),
                         event("content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": ""}),
                         event("content_block_delta", index=1, delta={"type": "input_json_delta",
                                                                      "partial_json": "{}"}),
                         event("content_block_stop", index=1),
                         event("message_delta", delta={"stop_reason": "tool_use", "stop_sequence": None},
                               usage={"output_tokens": 9}),
                         event("message_stop")))

    [ex], _ = send_all(handler, "anthropic", [ChatRequest(messages=USER)])
    assert ex.ok and ex.extra["thinking"] == "hm"
    assert ex.chunk_chars == [2, 2] and len(ex.chunk_ns) == 2
    assert ex.tool_calls == [{"type": "tool_use", "id": "toolu_1", "name": "get", "input": {}}]
