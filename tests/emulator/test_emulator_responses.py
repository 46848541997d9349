"""The emulator's /v1/responses: the `openai` SDK parses its streams and bodies, each event holds
strictly against the SDK's types, and the scenario's semantics (timing, caching, structured output,
forced tools, cut answers, faults) come through as on /v1/chat/completions. Then every suite that
runs on the OpenAI protocol runs on the built-in emulator-responses target."""

from __future__ import annotations

import json
import re
import statistics

import jsonschema
import pytest

from prober.core.config import TargetConfig, default_config
from prober.core.records import ChatRequest
from prober.emulator import Scenario
from prober.emulator.scenario import Faults
from prober.emulator.tokenizer import count_tokens
from prober.run.runner import Runner
from prober.store import Store
from prober.targets import make_adapter
from prober.targets.conformance import check_exchange
from tests.emulator.test_emulator_sdk import _openai
from tests.support.cli import prober
from tests.support.emulator import run, running
from tests.support.timing import timing_sensitive

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(300)]

FAST = Scenario(first_token_delay_ms=5, decode_tokens_per_s=2000, output_tokens=12)
QUESTION = "What is the weather in Paris today?"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "degrees": {"type": "integer"}},
          "required": ["city", "degrees"], "additionalProperties": False}


def test_the_sdk_parses_a_stream_event_by_event_in_order() -> None:
    async def scenario():
        async with running(FAST) as emulator:
            client = _openai(emulator)
            stream = await client.responses.create(model="gpt-emu", input=QUESTION, instructions="be brief",
                                                   stream=True)
            events = [event async for event in stream]
            await client.close()
            return events, emulator.ground_truth()

    events, truth = run(scenario())
    kinds = [event.type for event in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[4:16] == ["response.output_text.delta"] * 12
    assert kinds[16:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    # every event is the SDK's own type for its `type`, not a fallback
    assert all(type(event).__name__.startswith("Response") for event in events)
    final = events[-1].response
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert final.output_text == text and count_tokens(text) == 12
    assert final.status == "completed" and final.instructions == "be brief"
    assert final.usage.output_tokens == 12
    assert final.usage.input_tokens == count_tokens("be brief") + count_tokens(QUESTION)
    assert final.usage.input_tokens_details.cached_tokens == 0
    assert truth[0]["protocol"] == "openai-responses" and truth[0]["path"] == "/v1/responses"


def test_the_sdk_parses_plain_and_cut_responses() -> None:
    async def scenario():
        async with running(FAST) as emulator:
            client = _openai(emulator)
            whole = await client.responses.create(model="gpt-emu", input=QUESTION)
            cut = await client.responses.create(model="gpt-emu", input=QUESTION, max_output_tokens=5)
            await client.close()
            return whole, cut

    whole, cut = run(scenario())
    assert whole.status == "completed" and whole.id.startswith("resp_") and count_tokens(whole.output_text) == 12
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    assert cut.usage.output_tokens == 5 and whole.output_text.startswith(cut.output_text)


async def _exchanges(scenario: Scenario, requests: list[ChatRequest]):
    async with running(scenario) as emulator:
        target = TargetConfig(name="e", protocol="openai-responses", model="gpt-emu", emulator={})
        adapter = make_adapter(target, emulator.base_url, None)
        try:
            return [await adapter.send(request) for request in requests]
        finally:
            await adapter.aclose()


@pytest.mark.parametrize("stream", [True, False])
def test_the_adapter_reads_text_structured_output_tools_and_cuts_with_no_findings(stream) -> None:
    user = [{"role": "user", "content": QUESTION}]
    tool = {"name": "weather", "input_schema": SCHEMA}
    requests = [ChatRequest(messages=user, system="be brief", stream=stream),
                ChatRequest(messages=user, stream=stream, max_tokens=200,
                            json_schema={"name": "weather", "schema": SCHEMA, "strict": True}),
                ChatRequest(messages=user, stream=stream, max_tokens=200, tools=[tool],
                            tool_choice={"type": "tool", "name": "weather"}),
                ChatRequest(messages=user, stream=stream, max_tokens=4)]
    text, structured, called, cut = run(_exchanges(FAST, requests))
    for ex in (text, structured, called, cut):
        assert ex.ok and check_exchange(ex) == [], ex.raw_events[:3]
        assert (ex.first_token_ns is not None) == stream and ex.first_answer_ns == ex.first_token_ns
    assert count_tokens(text.text) == 12 and text.usage["completion_tokens"] == 12
    assert text.finish_reason == "completed" and cut.finish_reason == "max_output_tokens"
    jsonschema.validate(json.loads(structured.text), SCHEMA)
    assert structured.request_body["text"]["format"]["type"] == "json_schema"
    [call] = called.tool_calls
    assert call["name"] == "weather" and call["id"].startswith("call_") and called.text == ""
    jsonschema.validate(call["input"], SCHEMA)


def test_automatic_caching_reports_cached_tokens() -> None:
    system = " ".join(f"word{i}" for i in range(1500))
    request = ChatRequest(messages=[{"role": "user", "content": "Go on."}], system=system, max_tokens=4)
    cold, warm = run(_exchanges(FAST, [request, request]))
    assert cold.usage["prompt_tokens_details"]["cached_tokens"] == 0
    cached = warm.usage["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 1024 and cached % 128 == 0 and cached <= warm.usage["prompt_tokens"]
    assert check_exchange(warm) == []


@pytest.mark.parametrize("stream", [True, False])
def test_a_mid_stream_fault_is_an_overloaded_error(stream) -> None:
    faulty = Scenario(first_token_delay_ms=5, decode_tokens_per_s=2000, output_tokens=12,
                      faults=Faults(mid_stream_error=1.0))
    [ex] = run(_exchanges(faulty, [ChatRequest(messages=[{"role": "user", "content": QUESTION}], stream=stream)]))
    assert ex.error_type == "overloaded", ex.error_message
    assert check_exchange(ex) == []
    if stream:
        assert ex.text and ex.raw_events[-1][0] == "error"


@timing_sensitive
def test_ttft_and_itl_follow_the_scenario_as_on_chat_completions() -> None:
    """The engine times both routes: interleaved requests on /v1/responses and /v1/chat/completions,
    the chat route the reference, measured in the same test."""
    slow = Scenario(first_token_delay_ms=120, decode_tokens_per_s=50, output_tokens=6)

    async def scenario():
        async with running(slow) as emulator:
            adapters = {protocol: make_adapter(TargetConfig(name=protocol, protocol=protocol, model="gpt-emu",
                                                            emulator={}), emulator.base_url, None)
                        for protocol in ("openai-responses", "openai")}
            request = ChatRequest(messages=[{"role": "user", "content": QUESTION}])
            try:
                return [(protocol, await adapter.send(request)) for _ in range(4)
                        for protocol, adapter in adapters.items()]
            finally:
                for adapter in adapters.values():
                    await adapter.aclose()

    timed = run(scenario())
    assert all(ex.ok for _, ex in timed)

    def median(protocol, figure):
        return statistics.median(figure(ex) for p, ex in timed if p == protocol)

    def ttft(ex):
        return ex.ttft_ms

    def itl(ex):
        return (ex.chunk_ns[-1] - ex.chunk_ns[0]) / 1e6 / (len(ex.chunk_ns) - 1)

    for figure in (ttft, itl):
        ratio = median("openai-responses", figure) / median("openai", figure)
        assert 0.8 <= ratio <= 1.25, (figure.__name__, ratio)
    assert median("openai-responses", ttft) >= 120 * 0.95


# --- every suite that runs on the OpenAI protocol -----------------------------------------------------

def _suite(tmp_path, suite: str, params: dict):
    config = default_config()
    config.store.url = f"sqlite:///{tmp_path}/{suite}.db"
    config.runner.progress = False
    result = Runner(config).run(suite, ["emulator-responses"], params)
    assert result.exit_code == 0, result.problems
    store = Store.open(config.store.url)
    try:
        rows = store.samples(result.run_id)
        metrics = {(m["name"], json.dumps(m["labels"], sort_keys=True)): m["value"]
                   for m in store.metrics(result.run_id)}
    finally:
        store.close()
    assert rows and all(r["protocol"] == "openai-responses" and r["url"].endswith("/v1/responses") for r in rows)
    assert [r for r in rows if r["error_type"] or r["findings"]] == []
    return rows, metrics


def _value(metrics, name, **labels):
    return metrics[(name, json.dumps(labels, sort_keys=True))]


def test_latency_suite(tmp_path) -> None:
    rows, metrics = _suite(tmp_path, "latency", {"levels": [1, 4], "requests_per_level": 8, "warmup": 1})
    assert len(rows) == 2 * (8 + 1)
    assert _value(metrics, "ttft_p50_ms", concurrency=4) > 0 and ("itl_p99_ms", '{"concurrency": 4}') in metrics


def test_caching_suite_reads_cached_tokens(tmp_path) -> None:
    _, metrics = _suite(tmp_path, "caching", {"cases": ["repeat", "volatile"], "requests": 4,
                                                 "prefix_tokens": 1400, "volatile_positions": ["system_start"]})
    assert _value(metrics, "hit_rate", case="repeat") == 1.0
    assert _value(metrics, "read_fraction", case="repeat") > 0.8
    assert _value(metrics, "read_fraction", case="volatile", position="system_start") == 0.0
    assert _value(metrics, "cache_read_reported", case="usage") == 1.0
    assert _value(metrics, "usage_consistent", case="usage") == 1.0


def test_divergence_suite_with_structured_output_through_text_format(tmp_path) -> None:
    rows, metrics = _suite(tmp_path, "divergence", {"levels": [1, 4], "requests_per_level": 6, "max_tokens": 48,
                                                    "prompts": ["story", "review_json"]})
    structured = [r for r in rows if r["labels"].get("prompt") == "review_json"]
    assert structured and all(r["request_body"]["text"]["format"]["type"] == "json_schema" for r in structured)
    body = rows[0]["request_body"]
    assert "seed" not in body and "frequency_penalty" not in body and body["temperature"] == 0.0
    assert _value(metrics, "json_valid_rate", prompt="review_json", concurrency=4) == 1.0


def test_schema_order_suite(tmp_path) -> None:
    rows, metrics = _suite(tmp_path, "schema_order", {"limit": 8, "concurrency": 4})
    assert all(r["request_body"]["text"]["format"]["type"] == "json_schema" for r in rows)
    assert any(name == "accuracy" for name, _ in metrics)


def test_penalty_suite_skips_the_target_in_one_line(tmp_path) -> None:
    result = prober("run", "--suite", "penalty", "--target", "emulator-responses", "--db",
                    f"sqlite:///{tmp_path}/p.db", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if "penalty skipped" in line]
    assert len(lines) == 1 and re.search(r"Responses API takes no frequency, presence or repetition penalty",
                                         lines[0]), lines
    assert "Traceback" not in result.stderr


def test_a_failed_stream_is_retried_and_the_target_is_listed(tmp_path) -> None:
    scenario = tmp_path / "scenario.toml"
    scenario.write_text('first_token_delay_ms = 5\n\n[faults]\nfail_first_n = 2\n'
                        'fail_first_kind = "mid_stream_error"\n')
    config = default_config()
    config.store.url = f"sqlite:///{tmp_path}/retry.db"
    config.runner.progress = False
    config.runner.backoff_base = 0.01
    config.targets["emulator-responses"].emulator.scenario = str(scenario)
    result = Runner(config).run("latency", ["emulator-responses"], {"levels": [1], "requests_per_level": 2,
                                                                     "warmup": 0})
    assert result.exit_code == 0, result.problems
    store = Store.open(config.store.url)
    try:
        rows = store.samples(result.run_id)
    finally:
        store.close()
    failed = [r for r in rows if r["error_type"]]
    assert [(r["error_type"], r["final"]) for r in failed] == [("overloaded", False)] * 2
    assert all("error event after HTTP 200" in r["error_message"] for r in failed)
    assert len([r for r in rows if r["final"] and not r["error_type"]]) == 2
    listed = prober("targets", cwd=tmp_path)
    assert listed.returncode == 0
    for name in ("emulator-responses", "local-responses"):
        assert re.search(rf"{name}\s.*openai-responses", listed.stdout), listed.stdout
