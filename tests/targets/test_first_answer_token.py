"""TTFT and the answer's TTFT on scripted reasoning and tool-only streams, both protocols: TTFT
opens at the first content-bearing event of any channel, `first_answer_ns` at the first answer
token after any reasoning, and a tool-only answer starts at its first non-empty arguments on
every protocol, never at the event that only names the tool (docs/measurements-definitions.md)."""

from __future__ import annotations

import asyncio
import json

import pytest

from prober.core.records import ChatRequest, Sample
from prober.store.rows import sample_row
from tests.support.scripted_server import LAST_CHUNK, chunk, sse_head
from tests.targets.test_targets_edge_cases import USER, send_all

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]


def anthropic_event(name: str, **data) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()


ANTHROPIC_START = anthropic_event("message_start", message={
    "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "m", "stop_reason": None,
    "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 1}})
ANTHROPIC_END = [anthropic_event("message_delta", delta={"stop_reason": "end_turn", "stop_sequence": None},
                                 usage={"output_tokens": 9}), anthropic_event("message_stop")]


def openai_chunk(delta: dict) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


OPENAI_END = [b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
              b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n', b"data: [DONE]\n\n"]


def paced(events: list[bytes], pause_s: float = 0.02):
    """A handler that sends each event in its own chunk, `pause_s` apart: each arrives on its own."""
    async def handler(request, writer, server):
        writer.write(sse_head())
        for event in events:
            writer.write(chunk(event))
            await writer.drain()
            await asyncio.sleep(pause_s)
        writer.write(LAST_CHUNK)
    return handler


def thinking_stream(protocol: str) -> list[bytes]:
    if protocol == "anthropic":
        return [ANTHROPIC_START,
                anthropic_event("content_block_start", index=0,
                                content_block={"type": "thinking", "thinking": "", "signature": ""}),
                anthropic_event("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "Let"}),
                anthropic_event("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": " me"}),
                anthropic_event("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "Eq"}),
                anthropic_event("content_block_stop", index=0),
                anthropic_event("content_block_start", index=1, content_block={"type": "text", "text": ""}),
                anthropic_event("content_block_delta", index=1, delta={"type": "text_delta", "text": ""}),
                anthropic_event("content_block_delta", index=1, delta={"type": "text_delta", "text": "Four"}),
                anthropic_event("content_block_delta", index=1, delta={"type": "text_delta", "text": "."}),
                anthropic_event("content_block_stop", index=1), *ANTHROPIC_END]
    return [openai_chunk({"role": "assistant", "content": ""}),
            openai_chunk({"reasoning_content": "Let"}), openai_chunk({"reasoning_content": " me"}),
            openai_chunk({"content": ""}), openai_chunk({"content": "Four"}), openai_chunk({"content": "."}),
            *OPENAI_END]


def tool_stream(protocol: str) -> list[bytes]:
    if protocol == "anthropic":
        return [ANTHROPIC_START,
                anthropic_event("content_block_start", index=0, content_block={
                    "type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}),
                anthropic_event("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": ""}),
                anthropic_event("content_block_delta", index=0,
                                delta={"type": "input_json_delta", "partial_json": '{"city":'}),
                anthropic_event("content_block_delta", index=0,
                                delta={"type": "input_json_delta", "partial_json": '"Paris"}'}),
                anthropic_event("content_block_stop", index=0), *ANTHROPIC_END]
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    return [openai_chunk({"role": "assistant", "content": None}),
            openai_chunk({"tool_calls": [call]}),
            openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
            openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
            *OPENAI_END]


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
def test_ttft_is_the_first_reasoning_token_and_ttft_answer_the_first_answer_token(protocol):
    [ex], _ = send_all(paced(thinking_stream(protocol)), protocol, [ChatRequest(messages=USER)])
    assert ex.ok and ex.text == "Four."
    # Content chunks: two reasoning pieces, then two answer pieces; empty and signature deltas,
    # the role-only chunk and block starts are none.
    assert ex.chunk_chars == [3, 3, 4, 1]
    assert ex.first_token_ns == ex.chunk_ns[0]
    assert ex.first_answer_ns == ex.chunk_ns[2] > ex.first_token_ns
    row = sample_row(Sample(run_id="r", target="t", probe="latency", case="c", labels={}, exchange=ex), None)
    assert row["ttft_answer_ms"] == pytest.approx((ex.first_answer_ns - ex.start_ns) / 1e6)
    assert row["ttft_answer_ms"] > row["ttft_ms"]


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
def test_a_tool_only_answer_starts_at_its_first_arguments_on_every_protocol(protocol):
    [ex], _ = send_all(paced(tool_stream(protocol)), protocol, [ChatRequest(messages=USER)])
    assert ex.ok and ex.tool_calls[0]["name"] == "get_weather" and ex.tool_calls[0]["input"] == {"city": "Paris"}
    # The same two chunks on both protocols: the naming event and the empty arguments are none.
    assert ex.chunk_chars == [8, 8]
    assert ex.first_token_ns == ex.first_answer_ns == ex.chunk_ns[0]


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
def test_without_reasoning_the_answers_ttft_is_the_ttft(protocol):
    events = thinking_stream(protocol)
    plain = [e for e in events if b"thinking" not in e and b"reasoning" not in e and b"signature" not in e]
    if protocol == "anthropic":      # the text block becomes block 0 once the thinking block is gone
        plain = [e.replace(b'"index": 1', b'"index": 0') for e in plain]
    [ex], _ = send_all(paced(plain), protocol, [ChatRequest(messages=USER)])
    assert ex.ok and ex.chunk_chars == [4, 1]
    assert ex.first_answer_ns == ex.first_token_ns == ex.chunk_ns[0]
