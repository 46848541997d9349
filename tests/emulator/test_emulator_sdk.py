"""The official SDKs parse what the emulator sends, streaming and not."""

from __future__ import annotations

import anthropic
import openai
import pytest

from prober.emulator import Scenario
from prober.emulator.tokenizer import count_tokens
from tests.support.emulator import run, running

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]

FAST = Scenario(first_token_delay_ms=5, decode_tokens_per_s=2000, output_tokens=12, system_fingerprint="fp_test")
MESSAGES = [{"role": "user", "content": "What is the weather in Paris today?"}]
PROMPT_TOKENS = count_tokens("What is the weather in Paris today?")


def _anthropic(emulator) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=emulator.base_url, api_key="x", max_retries=0)


def _openai(emulator) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=emulator.base_url + "/v1", api_key="x", max_retries=0)


def test_anthropic_non_streaming_message() -> None:
    async def scenario():
        async with running(FAST) as emulator:
            client = _anthropic(emulator)
            message = await client.messages.create(model="claude-emu", max_tokens=100, messages=MESSAGES)
            cut = await client.messages.create(model="claude-emu", max_tokens=5, messages=MESSAGES)
            await client.close()
            return message, cut, emulator.ground_truth()

    message, cut, truth = run(scenario())
    assert message.model == "claude-emu"
    assert message.stop_reason == "end_turn"
    assert message.content[0].type == "text"
    assert count_tokens(message.content[0].text) == 12
    assert message.usage.output_tokens == 12
    assert message.usage.input_tokens == PROMPT_TOKENS
    assert message.usage.cache_read_input_tokens == 0
    assert message.usage.cache_creation_input_tokens == 0
    assert message.id.startswith("msg_")
    assert message._request_id == truth[0]["request_id"]
    # max_tokens cuts the same answer short
    assert cut.stop_reason == "max_tokens"
    assert cut.usage.output_tokens == 5
    assert message.content[0].text.startswith(cut.content[0].text)


def test_anthropic_streaming_helper_and_raw_events() -> None:
    async def scenario():
        async with running(FAST) as emulator:
            client = _anthropic(emulator)
            async with client.messages.stream(model="claude-emu", max_tokens=100, messages=MESSAGES) as stream:
                pieces = [text async for text in stream.text_stream]
                final = await stream.get_final_message()
            raw = await client.messages.create(model="claude-emu", max_tokens=3, messages=MESSAGES, stream=True)
            kinds = [event.type async for event in raw]
            plain = await client.messages.create(model="claude-emu", max_tokens=100, messages=MESSAGES)
            await client.close()
            return pieces, final, kinds, plain

    pieces, final, kinds, plain = run(scenario())
    assert len(pieces) == 12                       # one token per content chunk
    assert "".join(pieces) == final.content[0].text == plain.content[0].text   # same prompt, same text
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 12
    assert final.usage.input_tokens == PROMPT_TOKENS
    assert kinds == ["message_start", "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_delta", "content_block_stop", "message_delta", "message_stop"]


def test_anthropic_count_tokens_matches_generation() -> None:
    request = {"system": [{"type": "text", "text": "You are terse."}],
               "messages": MESSAGES + [{"role": "assistant", "content": [{"type": "text", "text": "Sunny, 21C."}]},
                                       {"role": "user", "content": "And tomorrow?"}]}

    async def scenario():
        async with running(FAST) as emulator:
            client = _anthropic(emulator)
            counted = await client.messages.count_tokens(model="claude-emu", **request)
            message = await client.messages.create(model="claude-emu", max_tokens=10, **request)
            await client.close()
            return counted, message

    counted, message = run(scenario())
    assert counted.input_tokens == message.usage.input_tokens
    assert counted.input_tokens == count_tokens("You are terse. What is the weather in Paris today? "
                                                "Sunny, 21C. And tomorrow?")


def test_openai_non_streaming_completion() -> None:
    async def scenario():
        async with running(FAST) as emulator:
            client = _openai(emulator)
            completion = await client.chat.completions.create(model="gpt-emu", messages=MESSAGES)
            cut = await client.chat.completions.create(model="gpt-emu", messages=MESSAGES, max_tokens=4)
            await client.close()
            return completion, cut

    completion, cut = run(scenario())
    assert completion.model == "gpt-emu"
    assert completion.system_fingerprint == "fp_test"
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    assert count_tokens(choice.message.content) == 12
    assert completion.usage.completion_tokens == 12
    assert completion.usage.prompt_tokens == PROMPT_TOKENS
    assert completion.usage.total_tokens == PROMPT_TOKENS + 12
    assert completion.usage.prompt_tokens_details.cached_tokens == 0
    assert cut.choices[0].finish_reason == "length"
    assert cut.usage.completion_tokens == 4
    assert choice.message.content.startswith(cut.choices[0].message.content)


def test_openai_streaming_with_and_without_usage() -> None:
    async def scenario():
        async with running(FAST) as emulator:
            client = _openai(emulator)
            stream = await client.chat.completions.create(model="gpt-emu", messages=MESSAGES, stream=True,
                                                          stream_options={"include_usage": True})
            with_usage = [chunk async for chunk in stream]
            stream = await client.chat.completions.create(model="gpt-emu", messages=MESSAGES, stream=True)
            without_usage = [chunk async for chunk in stream]
            await client.close()
            return with_usage, without_usage

    with_usage, without_usage = run(scenario())
    first, *content, finish, usage_chunk = with_usage
    assert first.choices[0].delta.role == "assistant" and first.choices[0].delta.content == ""
    assert len(content) == 12
    assert all(chunk.choices[0].delta.content for chunk in content)
    assert finish.choices[0].finish_reason == "stop"
    assert usage_chunk.choices == []
    assert usage_chunk.usage.completion_tokens == 12
    assert usage_chunk.usage.prompt_tokens == PROMPT_TOKENS
    assert all(chunk.usage is None for chunk in with_usage[:-1])
    assert {chunk.system_fingerprint for chunk in with_usage} == {"fp_test"}
    assert len({chunk.id for chunk in with_usage}) == 1
    # without include_usage: no usage chunk at all
    assert without_usage[-1].choices[0].finish_reason == "stop"
    assert all(chunk.usage is None for chunk in without_usage)
    assert len(without_usage) == len(with_usage) - 1


def test_openai_lists_scenario_models_and_accepts_any_model() -> None:
    async def scenario():
        async with running(Scenario(models=["alpha", "beta"], output_tokens=3, first_token_delay_ms=1)) as emulator:
            client = _openai(emulator)
            models = [model.id async for model in client.models.list()]
            completion = await client.chat.completions.create(model="not-listed", messages=MESSAGES)
            anthropic_models = [model.id async for model in _anthropic(emulator).models.list()]
            await client.close()
            return models, completion, anthropic_models

    models, completion, anthropic_models = run(scenario())
    assert models == ["alpha", "beta"] == anthropic_models
    assert completion.model == "not-listed"


def test_one_connection_serves_streams_and_plain_requests_in_turn() -> None:
    """Chunked streams keep the connection reusable (llama-server's did not, see measured-here.md)."""
    async def scenario():
        async with running(FAST) as emulator:
            client = _anthropic(emulator)
            texts = []
            for _ in range(3):
                async with client.messages.stream(model="m", max_tokens=50, messages=MESSAGES) as stream:
                    texts.append(await stream.get_final_text())
                message = await client.messages.create(model="m", max_tokens=50, messages=MESSAGES)
                texts.append(message.content[0].text)
            await client.close()
            return texts, emulator.ground_truth()

    texts, truth = run(scenario())
    assert len(set(texts)) == 1
    assert len(truth) == 6 and all(record["status"] == 200 for record in truth)
