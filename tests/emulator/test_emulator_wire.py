"""Byte-level shape of the emulator's responses, held against the recorded wire samples."""

from __future__ import annotations

import json

import pytest

from prober.emulator import Scenario
from tests.support.emulator import (
    RawConnection,
    anthropic_body,
    openai_body,
    raw_request,
    run,
    running,
    sse_events,
    wire_samples_dir,
)

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]

SAMPLES = wire_samples_dir()
FAST = Scenario(first_token_delay_ms=2, decode_tokens_per_s=5000, output_tokens=5)


def _sample(name: str) -> list[tuple[str | None, str]]:
    return sse_events((SAMPLES / name).read_bytes())


def _keys(value, prefix: str = "") -> set[str]:
    """Every key path in a JSON value ("message.usage.input_tokens"); list items share their list's path."""
    paths: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            paths.add(prefix + key)
            paths |= _keys(item, prefix + key + ".")
    elif isinstance(value, list):
        for item in value:
            paths |= _keys(item, prefix)
    return paths


async def _post(body: dict, path: str, scenario: Scenario = FAST):
    async with running(scenario) as emulator:
        return await raw_request(emulator.port, "POST", path, body)


def test_anthropic_stream_matches_recorded_basic_sample() -> None:
    response = run(_post(anthropic_body(max_tokens=3), "/v1/messages"))
    assert response.status == 200 and response.complete
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["transfer-encoding"] == "chunked"
    assert response.headers["request-id"].startswith("req_")

    ours = response.events()
    recorded = _sample("anthropic-messages-stream-basic.sse")
    # The recorded answer has three text deltas, so does ours (max_tokens=3): the whole sequence matches.
    assert [name for name, _ in ours] == [name for name, _ in recorded]
    for (name, our_data), (_, recorded_data) in zip(ours, recorded):
        ours_json, recorded_json = json.loads(our_data), json.loads(recorded_data)
        assert ours_json["type"] == name
        expected = _keys(recorded_json)
        if name == "message_start":   # cache fields are on by default, as in the tool-use sample
            expected |= {"message.usage.cache_creation_input_tokens", "message.usage.cache_read_input_tokens"}
        assert _keys(ours_json) == expected, name
    assert ours[2][1] == '{"type": "ping"}'                  # byte for byte, space included
    assert json.loads(ours[0][1])["message"]["usage"]["output_tokens"] == 1
    assert json.loads(ours[-2][1])["delta"]["stop_reason"] == "max_tokens"
    assert json.loads(ours[-2][1])["usage"] == {"output_tokens": 3}
    # chunks hold whole `event: NAME\ndata: JSON\n\n` events; each content delta is a chunk of its own
    assert all(payload.startswith(b"event: ") and payload.endswith(b"\n\n") for _, payload in response.chunks)
    deltas = [payload for _, payload in response.chunks if b"content_block_delta" in payload]
    assert len(deltas) == 3 and all(payload.count(b"\n\n") == 1 for payload in deltas)


def test_anthropic_message_start_usage_matches_tool_use_sample_fields() -> None:
    response = run(_post(anthropic_body(), "/v1/messages"))
    ours = json.loads(response.events()[0][1])["message"]["usage"]
    recorded = json.loads(_sample("anthropic-messages-stream-tool-use.sse")[0][1])["message"]["usage"]
    assert set(ours) == set(recorded) - {"service_tier"}


def test_anthropic_cache_fields_absent_when_scenario_turns_them_off() -> None:
    response = run(_post(anthropic_body(), "/v1/messages", Scenario(cache_usage_fields=False, output_tokens=2)))
    usage = json.loads(response.events()[0][1])["message"]["usage"]
    assert set(usage) == {"input_tokens", "output_tokens"}


def test_openai_stream_matches_recorded_sample() -> None:
    response = run(_post(openai_body(), "/v1/chat/completions"))
    assert response.status == 200 and response.complete
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["x-request-id"].startswith("req_")
    ours = response.events()
    recorded = _sample("openai-chat-stream-include-usage.sse")
    assert all(name is None for name, _ in ours)
    assert ours[-1][1] == recorded[-1][1] == "[DONE]"
    ours_json = [json.loads(data) for _, data in ours[:-1]]
    recorded_json = [json.loads(data) for _, data in recorded[:-1]]
    # role chunk, content chunks, finish chunk, usage chunk
    assert ours_json[0]["choices"][0]["delta"] == recorded_json[0]["choices"][0]["delta"]
    assert ours_json[-2]["choices"][0]["delta"] == {} and ours_json[-2]["choices"][0]["finish_reason"] == "stop"
    assert ours_json[-1]["choices"] == [] == recorded_json[-1]["choices"]
    # same fields as the recording; with include_usage the live API adds "usage": null to the others
    for mine, theirs in [(ours_json[0], recorded_json[0]), (ours_json[1], recorded_json[1]),
                         (ours_json[-2], recorded_json[-2])]:
        assert _keys(mine) == _keys(theirs) | {"usage"}
        assert mine["usage"] is None
    assert _keys(recorded_json[-1]) <= _keys(ours_json[-1])
    assert {"usage.prompt_tokens_details.cached_tokens"} <= _keys(ours_json[-1])
    assert len(ours_json) == 5 + 3          # role + 5 tokens + finish + usage
    assert all(chunk["system_fingerprint"] == "fp_emulator" for chunk in ours_json)


def test_openai_stream_without_include_usage_has_no_usage_key() -> None:
    response = run(_post(openai_body(include_usage=False), "/v1/chat/completions"))
    chunks = [json.loads(data) for _, data in response.events()[:-1]]
    assert all("usage" not in chunk for chunk in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_non_streaming_responses_carry_content_length_and_ids() -> None:
    async def scenario():
        async with running(FAST) as emulator:
            connection = await RawConnection.open(emulator.port)
            anthropic = await connection.request("POST", "/v1/messages", anthropic_body(stream=False))
            openai = await connection.request("POST", "/v1/chat/completions", openai_body(stream=False))
            await connection.close()
            return anthropic, openai

    anthropic, openai = run(scenario())
    assert anthropic.headers["content-length"] == str(len(anthropic.body))
    message = anthropic.json()
    assert set(message) == {"id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"}
    assert message["type"] == "message" and message["stop_reason"] == "end_turn"
    assert anthropic.headers["request-id"].startswith("req_")
    completion = openai.json()
    assert completion["object"] == "chat.completion" and completion["id"].startswith("chatcmpl-")
    assert completion["choices"][0]["finish_reason"] == "stop"
    assert openai.headers["x-request-id"].startswith("req_")


@pytest.mark.parametrize("body, problem", [
    (b"{not json", "parsing"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"model": "m", "max_tokens": 5}, "messages"),
    ({"model": "m", "max_tokens": 5, "messages": []}, "messages"),
    ({"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
])
def test_anthropic_invalid_requests_get_400(body, problem) -> None:
    response = run(_post(body, "/v1/messages"))
    assert response.status == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert problem in error["error"]["message"]
    assert error["request_id"] == response.headers["request-id"]


@pytest.mark.parametrize("body, param", [
    ({"messages": [{"role": "user", "content": "x"}]}, "model"),
    ({"model": "m"}, "messages"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}, "max_tokens"),
])
def test_openai_invalid_requests_get_400(body, param) -> None:
    response = run(_post(body, "/v1/chat/completions"))
    assert response.status == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param


def test_unknown_route_is_404_and_connection_survives() -> None:
    async def scenario():
        async with running(FAST) as emulator:
            connection = await RawConnection.open(emulator.port)
            missing = await connection.request("GET", "/v1/nothing")
            after = await connection.request("POST", "/v1/messages", anthropic_body())
            await connection.close()
            return missing, after

    missing, after = run(scenario())
    assert missing.status == 404 and "error" in missing.json()
    assert after.status == 200 and after.complete


def test_chunked_request_bodies_are_read() -> None:
    async def scenario():
        async with running(FAST) as emulator:
            connection = await RawConnection.open(emulator.port)
            payload = json.dumps(anthropic_body(stream=False)).encode()
            half = len(payload) // 2
            connection.writer.write(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
                                    + b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n"
                                    % (half, payload[:half], len(payload) - half, payload[half:]))
            response = await connection._read_head()
            await connection._read_body(response)
            await connection.close()
            return response

    response = run(scenario())
    assert response.status == 200 and response.json()["type"] == "message"


def test_ground_truth_and_reset_endpoints() -> None:
    async def scenario():
        async with running(FAST) as emulator:
            connection = await RawConnection.open(emulator.port)
            await connection.request("POST", "/v1/messages", anthropic_body())
            await connection.request("POST", "/v1/chat/completions", openai_body(stream=False))
            truth = await connection.request("GET", "/_emulator/ground_truth")
            reset = await connection.request("POST", "/_emulator/reset")
            after = await connection.request("GET", "/_emulator/ground_truth")
            scenario_json = await connection.request("GET", "/_emulator/scenario")
            in_process = emulator.ground_truth()
            await connection.close()
            return truth.json(), reset, after.json(), scenario_json.json(), in_process

    truth, reset, after, scenario_json, in_process = run(scenario())
    assert [record["protocol"] for record in truth] == ["anthropic", "openai"]
    assert [record["stream"] for record in truth] == [True, False]
    for record in truth:
        assert record["status"] == 200 and record["fault"] is None
        assert record["output_tokens"] == record["tokens_sent"] == 5
        assert record["ttft_ms"] > 0 and record["queue_wait_ms"] == 0
        assert record["arrived_utc"].endswith("+00:00")
        assert record["first_token_mono_ns"] > record["arrived_mono_ns"]
    assert reset.status == 200 and after == [] == in_process
    assert scenario_json["output_tokens"] == 5
