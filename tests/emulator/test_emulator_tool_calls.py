"""Answers given as a tool call: a behaviour sets `plan.tool_name` and the emulator renders the plan's
tokens as the call's arguments, in both protocols, streamed and not. Checked against the official
SDKs and the prober's own adapters (each implements the wire independently). Also: the Messages API
refuses penalty fields, and the adapter records that as a rejected parameter."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from prober.core.config import TargetConfig
from prober.core.records import ChatRequest
from prober.emulator import Scenario
from prober.emulator.behaviours import base_behaviours
from prober.targets import make_adapter
from tests.support.emulator import run, running

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]

FAST = Scenario(first_token_delay_ms=5, decode_tokens_per_s=2000)
ANSWER = ['{"label', '": "bug', '", "confidence', '": 0.9}']
TOOL = {"name": "record_answer", "description": "Record the answer.",
        "input_schema": {"type": "object", "properties": {"label": {"type": "string"},
                                                          "confidence": {"type": "number"}}}}
MESSAGES = [{"role": "user", "content": "Classify: the app crashes on start."}]


class AnswerWithForcedTool:
    """Answers a request that forces a tool with ANSWER as that tool's arguments (cut at max_tokens)."""

    def apply(self, request, plan, state) -> None:
        choice = request.body.get("tool_choice")
        if not isinstance(choice, dict):
            return
        name = choice.get("name") or (choice.get("function") or {}).get("name")
        plan.tool_name = name
        limit = request.max_tokens or len(ANSWER)
        plan.tokens = ANSWER[:limit]
        plan.finish = "stop" if limit >= len(ANSWER) else "length"


def _behaviours():
    chain = base_behaviours(FAST)
    return [chain[0], AnswerWithForcedTool(), *chain[1:]]


def test_anthropic_sdk_reads_the_tool_call_streamed_and_not() -> None:
    async def scenario():
        async with running(FAST, _behaviours()) as emulator:
            client = anthropic.AsyncAnthropic(base_url=emulator.base_url, api_key="x", max_retries=0)
            kwargs = dict(model="claude-emu", max_tokens=100, messages=MESSAGES, tools=[TOOL],
                          tool_choice={"type": "tool", "name": "record_answer"})
            message = await client.messages.create(**kwargs)
            async with client.messages.stream(**kwargs) as stream:
                streamed = await stream.get_final_message()
            await client.close()
            return message, streamed

    message, streamed = run(scenario())
    for reply in (message, streamed):
        assert reply.stop_reason == "tool_use"
        assert [block.type for block in reply.content] == ["tool_use"]
        assert reply.content[0].name == "record_answer"
        assert reply.content[0].input == {"label": "bug", "confidence": 0.9}
        assert reply.content[0].id.startswith("toolu_")


def test_openai_sdk_reads_the_tool_call_streamed_and_not() -> None:
    function_tool = {"type": "function", "function": {"name": "record_answer",
                                                      "parameters": TOOL["input_schema"]}}

    async def scenario():
        async with running(FAST, _behaviours()) as emulator:
            client = openai.AsyncOpenAI(base_url=emulator.base_url + "/v1", api_key="x", max_retries=0)
            kwargs = dict(model="gpt-emu", messages=MESSAGES, tools=[function_tool],
                          tool_choice={"type": "function", "function": {"name": "record_answer"}})
            completion = await client.chat.completions.create(**kwargs)
            chunks = [chunk async for chunk in await client.chat.completions.create(stream=True, **kwargs)]
            await client.close()
            return completion, chunks

    completion, chunks = run(scenario())
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.function.name == "record_answer" and json.loads(call.function.arguments) == {
        "label": "bug", "confidence": 0.9}
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    assert deltas[0].tool_calls is None          # the role-only preamble carries no call
    calls = [piece for delta in deltas for piece in (delta.tool_calls or [])]
    assert calls[0].id.startswith("call_") and calls[0].function.name == "record_answer"
    assert all(piece.id is None for piece in calls[1:])
    assert "".join(piece.function.arguments for piece in calls) == "".join(ANSWER)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
@pytest.mark.parametrize("stream", [True, False])
def test_prober_adapters_read_the_tool_call_and_its_truncation(protocol: str, stream: bool) -> None:
    async def scenario():
        async with running(FAST, _behaviours()) as emulator:
            target = TargetConfig(protocol=protocol, base_url=emulator.base_url, model="emu")
            adapter = make_adapter(target, emulator.base_url, None)
            tool = {"name": TOOL["name"], "description": TOOL["description"], "input_schema": TOOL["input_schema"]}
            full = ChatRequest(messages=MESSAGES, max_tokens=100, stream=stream, tools=[tool],
                               tool_choice={"type": "tool", "name": "record_answer"})
            cut = ChatRequest(messages=MESSAGES, max_tokens=2, stream=stream, tools=[tool],
                              tool_choice={"type": "tool", "name": "record_answer"})
            exchanges = [await adapter.send(full), await adapter.send(cut)]
            await adapter.aclose()
            return exchanges

    full, cut = run(scenario())
    assert full.error_type is None, full.error_message
    assert full.tool_calls[0]["name"] == "record_answer"
    assert full.tool_calls[0]["input"] == {"label": "bug", "confidence": 0.9}
    assert full.finish_reason in ("tool_use", "tool_calls")
    if stream:
        assert full.first_token_ns is not None
        # Cut short, the streamed arguments do not parse, and the record says so.
        assert cut.tool_calls[0]["input"] == "".join(ANSWER[:2]) and cut.tool_calls[0]["parse_error"]
    assert cut.finish_reason in ("max_tokens", "length")


def test_messages_api_refuses_penalties_and_the_adapter_drops_them() -> None:
    async def scenario():
        async with running(FAST) as emulator:
            target = TargetConfig(protocol="anthropic", base_url=emulator.base_url, model="emu")
            adapter = make_adapter(target, emulator.base_url, None)
            exchange = await adapter.send(ChatRequest(messages=MESSAGES, max_tokens=8, sampling={
                "temperature": 0.0, "frequency_penalty": 0.5}))
            await adapter.aclose()
            return exchange, emulator.ground_truth()

    exchange, truth = run(scenario())
    assert exchange.error_type is None
    assert exchange.rejected_params == ["frequency_penalty"]
    assert [record["status"] for record in truth] == [400, 200]


WEATHER = {"type": "object", "required": ["city", "unit"], "additionalProperties": False,
           "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                          "days": {"type": "integer"}, "hourly": {"type": "boolean"},
                          "stations": {"type": "array", "items": {"type": "number"}}}}


def test_any_other_forced_tool_is_called_with_arguments_its_schema_accepts() -> None:
    """The default chain: no behaviour knows this tool, and the emulator still calls it, as the hosted
    APIs always call a forced tool; a decoy offered beside it is not called."""
    tools = [{"name": "lookup", "description": "Look a record up.",
              "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}},
             {"name": "get_weather", "description": "Forecast.", "input_schema": WEATHER}]

    async def scenario():
        async with running(FAST) as emulator:
            client = anthropic.AsyncAnthropic(base_url=emulator.base_url, api_key="x", max_retries=0)
            message = await client.messages.create(
                model="claude-emu", max_tokens=100, messages=MESSAGES, tools=tools,
                tool_choice={"type": "tool", "name": "get_weather"})
            plain = await client.messages.create(model="claude-emu", max_tokens=8, messages=MESSAGES, tools=tools)
            await client.close()
            return message, plain, emulator.ground_truth()

    message, plain, truth = run(scenario())
    assert message.stop_reason == "tool_use" and [b.name for b in message.content] == ["get_weather"]
    arguments = message.content[0].input
    types = {"city": str, "unit": str, "days": int, "hourly": bool, "stations": list}
    assert list(arguments) == list(WEATHER["properties"])          # declared order, every property
    assert all(isinstance(arguments[k], kind) for k, kind in types.items())
    assert arguments["unit"] in ("celsius", "fahrenheit") and arguments["city"]
    assert all(isinstance(x, float) for x in arguments["stations"])
    assert truth[0]["behaviours"]["tool_call"] == {"tool": "get_weather", "arguments": arguments}
    # Without tool_choice the model is free: the emulator answers in text, as before.
    assert plain.content[0].type == "text" and "tool_call" not in truth[1]["behaviours"]
