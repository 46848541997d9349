"""Recorded wire samples (hosted APIs, and llama-server recorded into tests/data/llama-server/)
through the adapters' stream handling: first through the pure layer (SSE parser + decoder, with
each event's position as its timestamp), then end to end through a loopback server that replays
the recorded bytes. Conformance finds nothing in them, and finds what was broken by hand."""

from __future__ import annotations

import asyncio
import copy
import json

import pytest

from prober.core.config import TargetConfig
from prober.core.records import ChatRequest, Exchange, utcnow
from prober.targets import make_adapter
from prober.targets.anthropic import AnthropicStreamDecoder
from prober.targets.conformance import check_exchange
from prober.targets.openai import OpenAIStreamDecoder
from prober.targets.responses import ResponsesStreamDecoder
from prober.targets.sse import SSEParser
from tests.support.scripted_server import (
    DATA,
    LAST_CHUNK,
    WIRE_SAMPLES,
    ScriptedServer,
    chunk,
    sse_events,
    sse_head,
)

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]
LLAMA = DATA / "llama-server"
DECODERS = {"anthropic": AnthropicStreamDecoder, "openai": OpenAIStreamDecoder,
            "openai-responses": ResponsesStreamDecoder}
INCLUDE_USAGE = {"stream_options": {"include_usage": True}}


def decode(protocol: str, raw: bytes, split: int = 7, request_body: dict | None = None) -> Exchange:
    """Feed SSE bytes in `split`-byte pieces; each event's timestamp is its position."""
    ex = Exchange(protocol=protocol, url="test", request_body=request_body or {}, request_headers={},
                  started_at=utcnow(), start_ns=0, status=200,
                  response_headers={"content-type": "text/event-stream"})
    decoder = DECODERS[protocol](ex)
    parser = SSEParser()
    position = 0
    for i in range(0, len(raw), split):
        for event, data in parser.feed(raw[i:i + split]):
            if not decoder.done:
                decoder.feed(event, data, position)
            position += 1
    if not decoder.done and ex.error_type is None:
        ex.error_type = "protocol"
    decoder.finish()
    return ex


def http_body(name: str) -> tuple[bytes, bytes]:
    """(head, de-chunked body) of a recorded llama-server response."""
    raw = (LLAMA / name).read_bytes()
    head, _, body = raw.partition(b"\r\n\r\n")
    if b"chunked" not in head.lower():
        return head, body
    out, i = b"", 0
    while True:
        j = body.index(b"\r\n", i)
        size = int(body[i:j], 16)
        if not size:
            return head, out
        out += body[j + 2:j + 2 + size]
        i = j + 4 + size


HOSTED = [
    ("anthropic", "anthropic-messages-stream-basic.sse", dict(
        text="Hello there!", usage={"input_tokens": 11, "output_tokens": 6},
        finish_reason="end_turn", first_token=3, chunk_chars=[5, 6, 1],
        request_id="msg_4QpJur2dWWDjF6C758FbBw5vm12BaVipnK", response_model="claude-3-opus-latest",
        tool_calls=[])),
    ("anthropic", "anthropic-messages-stream-tool-use.sse", dict(
        text="I'll check the current weather in Paris for you.",
        usage={"input_tokens": 377, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
               "output_tokens": 65, "service_tier": "standard"},
        # The empty input_json_delta that opens the tool block is not a content chunk.
        finish_reason="tool_use", first_token=3, chunk_chars=[1, 47, 8, 7, 2, 4], service_tier="standard",
        tool_calls=[{"type": "tool_use", "id": "toolu_01NRLabsLyVHZPKxbKvkfSMn",
                     "name": "get_weather", "input": {"location": "Paris"}}])),
    ("openai", "openai-chat-stream-include-usage.sse", dict(
        text="I'm unable to provide real-time weather updates. To get the current weather in San "
             "Francisco, I recommend checking a reliable weather website or a weather app.",
        usage={"prompt_tokens": 14, "completion_tokens": 30, "total_tokens": 44,
               "completion_tokens_details": {"reasoning_tokens": 0}},
        finish_reason="stop", first_token=1, n_chunks=30, system_fingerprint="fp_5050236cbd",
        request_id="chatcmpl-ABfw031mOJeYCSHe4yI2ZjOA6kMJL", tool_calls=[])),
]

LLAMA_STREAMS = [
    ("openai", "openai-stream-include-usage.http", dict(
        text="1. Red: Red, Black, White, Blue, Green, Yellow,",
        usage={"completion_tokens": 16, "prompt_tokens": 38, "total_tokens": 54,
               "prompt_tokens_details": {"cached_tokens": 0}},
        finish_reason="length", first_token=1, n_chunks=16, system_fingerprint="b0-unknown")),
    ("openai", "openai-stream.http", dict(
        text="1. Red: Red, Black,", usage=None, finish_reason="length", first_token=1, n_chunks=8)),
    ("anthropic", "anthropic-stream.http", dict(
        text="1. Red\n2. Blue\n3. Green",
        usage={"cache_read_input_tokens": 5, "input_tokens": 22, "output_tokens": 12},
        finish_reason="end_turn", first_token=2, n_chunks=11)),
]


def check(ex: Exchange, expected: dict) -> None:
    assert ex.error_type is None, ex.error_message
    assert ex.text == expected["text"]
    assert ex.usage == expected["usage"]          # exact: nothing added, nothing zero-filled
    assert ex.finish_reason == expected["finish_reason"]
    if "tool_calls" in expected:
        assert ex.tool_calls == expected["tool_calls"]
    if "chunk_chars" in expected:
        assert ex.chunk_chars == expected["chunk_chars"]
    if "service_tier" in expected:
        assert ex.service_tier == expected["service_tier"]
    if "n_chunks" in expected:
        assert len(ex.chunk_ns) == expected["n_chunks"]
    for key in ("system_fingerprint", "request_id", "response_model"):
        if key in expected:
            assert getattr(ex, key) == expected[key]


@pytest.mark.parametrize("split", [1, 7, 4096])
@pytest.mark.parametrize("protocol,name,expected", HOSTED, ids=[h[1] for h in HOSTED])
def test_hosted_samples_pure(protocol, name, expected, split):
    ex = decode(protocol, (WIRE_SAMPLES / name).read_bytes(), split, INCLUDE_USAGE)
    check(ex, expected)
    assert ex.first_token_ns == expected["first_token"]     # position of the first content event
    assert ex.chunk_ns[0] == expected["first_token"]
    assert check_exchange(ex) == []


@pytest.mark.parametrize("protocol,name,expected", LLAMA_STREAMS, ids=[h[1] for h in LLAMA_STREAMS])
def test_llama_server_streams_pure(protocol, name, expected):
    _head, body = http_body(name)
    meta = json.loads((LLAMA / name.replace(".http", ".json")).read_text())
    ex = decode(protocol, body, 11, meta["request"])
    check(ex, expected)
    assert ex.first_token_ns == expected["first_token"]
    assert check_exchange(ex) == []
    if protocol == "openai":
        assert set(ex.extra["timings"]) >= {"prompt_n", "predicted_n", "predicted_ms"}


# --- end to end, through a loopback server replaying the bytes ------------------------------------

def _target(protocol: str, url: str) -> TargetConfig:
    return TargetConfig(protocol=protocol, base_url=url, model="m", name="t")


async def _send(protocol: str, payloads: list[bytes], request: ChatRequest) -> tuple[Exchange, ScriptedServer]:
    async def handler(req, writer, server):
        writer.write(payloads[min(len(server.requests), len(payloads)) - 1])

    async with ScriptedServer(handler) as server:
        adapter = make_adapter(_target(protocol, server.url), server.url, "sk-secret")
        ex = await adapter.send(request)
        await adapter.aclose()
    return ex, server


@pytest.mark.parametrize("protocol,name,expected", HOSTED, ids=[h[1] for h in HOSTED])
def test_hosted_samples_end_to_end(protocol, name, expected):
    events = sse_events((WIRE_SAMPLES / name).read_bytes())
    payload = sse_head(headers={"request-id": "req_1"}) + b"".join(chunk(e) for e in events) + LAST_CHUNK
    ex, _ = asyncio.run(_send(protocol, [payload], ChatRequest(messages=[{"role": "user", "content": "hi"}])))
    check(ex, {k: v for k, v in expected.items() if k != "request_id"})
    assert ex.request_id == "req_1"                     # the header wins over the body id
    assert ex.start_ns <= ex.headers_ns <= ex.first_byte_ns <= ex.first_token_ns <= ex.end_ns
    assert ex.ttft_ms is not None and ex.ttft_ms >= 0
    assert check_exchange(ex) == []


@pytest.mark.parametrize("protocol,name,expected", LLAMA_STREAMS, ids=[h[1] for h in LLAMA_STREAMS])
def test_llama_server_streams_end_to_end(protocol, name, expected):
    raw = (LLAMA / name).read_bytes()
    meta = json.loads((LLAMA / name.replace(".http", ".json")).read_text())
    request = ChatRequest(messages=meta["request"]["messages"], stream=True,
                          extra={} if "stream_options" in meta["request"] else {"stream_options": None})
    ex, _ = asyncio.run(_send(protocol, [raw], request))
    check(ex, expected)
    assert ex.response_headers["server"] == "llama.cpp"
    assert ex.response_headers["content-type"] == "text/event-stream"
    assert check_exchange(ex) == []


def test_llama_server_nonstream_openai():
    raw = (LLAMA / "openai-nonstream.http").read_bytes()
    ex, _ = asyncio.run(_send("openai", [raw], ChatRequest(messages=[], stream=False)))
    assert ex.error_type is None and ex.status == 200
    assert ex.text == "1. Red: Red, Black, White, Blue, Green, Yellow,"
    assert ex.usage == {"completion_tokens": 16, "prompt_tokens": 38, "total_tokens": 54,
                        "prompt_tokens_details": {"cached_tokens": 37}}
    assert ex.finish_reason == "length" and ex.system_fingerprint == "b0-unknown"
    assert ex.request_id == "chatcmpl-KVllQGKuR2PEiAjau6hfqWGdfFxRHWVD"
    assert ex.extra["timings"]["cache_n"] == 37
    assert ex.first_token_ns is None and ex.chunk_ns == []
    assert check_exchange(ex) == []


def test_llama_server_nonstream_anthropic():
    raw = (LLAMA / "anthropic-nonstream.http").read_bytes()
    ex, _ = asyncio.run(_send("anthropic", [raw], ChatRequest(messages=[], stream=False)))
    assert ex.error_type is None
    assert ex.text == "1. Red\n2. Blue\n3. Green"
    assert ex.usage == {"cache_read_input_tokens": 26, "input_tokens": 1, "output_tokens": 12}
    assert ex.finish_reason == "end_turn"
    assert check_exchange(ex) == []


def test_llama_server_json_error_on_stream_request():
    raw = (LLAMA / "openai-stream-error.http").read_bytes()
    ex, _ = asyncio.run(_send("openai", [raw], ChatRequest(messages=[])))
    assert (ex.status, ex.error_type) == (400, "bad_request")
    assert "top_logprobs requires logprobs" in ex.error_message
    assert check_exchange(ex) == []


def test_llama_server_count_tokens():
    raw = (LLAMA / "anthropic-count-tokens.http").read_bytes()

    async def main():
        async def handler(req, writer, server):
            writer.write(raw)
        async with ScriptedServer(handler) as server:
            adapter = make_adapter(_target("anthropic", server.url), server.url, None)
            tokens = await adapter.count_tokens(ChatRequest(messages=[{"role": "user", "content": "x"}]))
            await adapter.aclose()
            return tokens, server.requests[0]
    tokens, request = asyncio.run(main())
    assert tokens == 27 and request.path == "/v1/messages/count_tokens"


# --- conformance on hand-broken variants ------------------------------------------------------------

def _events(name: str) -> list[tuple[str | None, str]]:
    return SSEParser().feed((WIRE_SAMPLES / name).read_bytes())


def _rebuild(events) -> bytes:
    out = b""
    for event, data in events:
        if event:
            out += f"event: {event}\n".encode()
        out += f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()
    return out


def _broken(name: str, protocol: str, edit) -> list[str]:
    events = [(e, d if d == "[DONE]" else json.loads(d)) for e, d in _events(name)]
    events = edit(copy.deepcopy(events))
    return check_exchange(decode(protocol, _rebuild(events), 4096, INCLUDE_USAGE))


def test_conformance_finds_wrong_types_and_missing_fields():
    def text_not_string(events):
        events[3][1]["delta"]["text"] = 7
        return events
    assert _broken("anthropic-messages-stream-basic.sse", "anthropic", text_not_string) == [
        "anthropic content_block_delta #3: delta.text: Input should be a valid string"]

    def no_usage(events):
        del events[7][1]["usage"]
        return events
    assert _broken("anthropic-messages-stream-basic.sse", "anthropic", no_usage) == [
        "anthropic message_delta #7: usage: Field required"]

    def unknown_delta(events):
        events[4][1]["delta"] = {"type": "sparkle_delta", "sparkle": "*"}
        return events
    assert _broken("anthropic-messages-stream-basic.sse", "anthropic", unknown_delta) == [
        "anthropic content_block_delta #4: delta.type: unknown value 'sparkle_delta'"]

    def created_as_string(events):
        events[2][1]["created"] = "yesterday"
        del events[5][1]["model"]
        return events
    findings = _broken("openai-chat-stream-include-usage.sse", "openai", created_as_string)
    assert findings == ["openai chunk #2: created: Input should be a valid integer",
                        "openai chunk #5: model: Field required"]


def test_conformance_protocol_level_findings():
    assert _broken("anthropic-messages-stream-basic.sse", "anthropic", lambda ev: ev[:-1]) == [
        "anthropic stream without message_stop"]
    assert _broken("anthropic-messages-stream-basic.sse", "anthropic",
                   lambda ev: [ev[0], ev[3], *ev[4:]]) == [
        "anthropic content_block_delta #1: delta for block 0 that is not open",
        "anthropic content_block_delta #2: delta for block 0 that is not open",
        "anthropic content_block_delta #3: delta for block 0 that is not open",
        "anthropic content_block_stop #4: stop for block 0 that is not open"]
    assert _broken("anthropic-messages-stream-basic.sse", "anthropic",
                   lambda ev: [("message_stop", ev[0][1]), *ev[1:]])[0] == \
        "anthropic message_start #0: SSE event name 'message_stop' but data.type 'message_start'"
    assert _broken("openai-chat-stream-include-usage.sse", "openai", lambda ev: ev[:-1]) == [
        "openai stream without [DONE]"]
    assert _broken("openai-chat-stream-include-usage.sse", "openai", lambda ev: ev[:-2] + ev[-1:]) == [
        "openai stream: no usage chunk although stream_options.include_usage was set"]


def test_conformance_non_stream_bodies():
    raw = (LLAMA / "anthropic-nonstream.http").read_bytes()
    ex, _ = asyncio.run(_send("anthropic", [raw.replace(b'"stop_reason":"end_turn"',
                                                        b'"stop_reason":"fin!!!!!"')],
                              ChatRequest(messages=[], stream=False)))
    assert check_exchange(ex) == ["anthropic message: stop_reason: Input should be 'end_turn', "
                                  "'max_tokens', 'stop_sequence', 'tool_use', 'pause_turn', "
                                  "'refusal' or 'model_context_window_exceeded'"]
    # llama-server answers /v1/messages errors in the OpenAI shape: a finding for Anthropic.
    error = (LLAMA / "openai-stream-error.http").read_bytes()
    ex, _ = asyncio.run(_send("anthropic", [error], ChatRequest(messages=[])))
    assert ex.error_type == "bad_request"
    assert "anthropic error body (HTTP 400): type: Field required" in check_exchange(ex)


def test_conformance_never_raises():
    ex = decode("openai", b"data: [1, 2]\n\n")
    ex.raw_events.append((None, object()))
    assert isinstance(check_exchange(ex), list)


def test_llama_server_closing_after_each_stream_costs_no_error():
    """llama-server closes the keep-alive connection after every streamed response without a
    Connection: close header (recorded: server_closed_after_response). The next request must
    still succeed, on a fresh connection."""
    meta = json.loads((LLAMA / "openai-stream-include-usage.json").read_text())
    assert meta["server_closed_after_response"] is True
    raw = (LLAMA / "openai-stream-include-usage.http").read_bytes()

    async def main():
        async def handler(req, writer, server):
            writer.write(raw)
            await writer.drain()
            return False                      # close, as llama-server does
        async with ScriptedServer(handler) as server:
            adapter = make_adapter(_target("openai", server.url), server.url, None)
            exchanges = [await adapter.send(ChatRequest(messages=USER_MESSAGE)) for _ in range(3)]
            await adapter.aclose()
            return exchanges, server
    exchanges, server = asyncio.run(main())
    assert [ex.error_type for ex in exchanges] == [None, None, None]
    assert all(ex.text.startswith("1. Red") for ex in exchanges)
    assert server.connections == 3


USER_MESSAGE = [{"role": "user", "content": "Name three colours, one word each."}]
