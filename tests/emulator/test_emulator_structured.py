"""JSON-asking requests get JSON: an object the requested schema accepts (so the divergence suite's
review_json has a meaningful JSON-valid rate), the same object for the same prompt, and under
load-dependent nondeterminism a forked object that is still valid and differs in its fields."""

from __future__ import annotations

import json

import openai
import pytest

from prober.emulator import Scenario, anthropic_wire, openai_wire
from prober.emulator.behaviours import Pipeline, ServerState, base_behaviours
from prober.probes.divergence import SHIPPED_PROMPTS
from tests.support.emulator import run, running

pytestmark = pytest.mark.emulator

REVIEW = next(p for p in SHIPPED_PROMPTS if p.name == "review_json")
SCHEMA = REVIEW.json_schema
ALONE = ServerState(seq=0, in_flight=0, active=0, queued=0)


def _openai_body(**extra) -> bytes:
    return json.dumps({"model": "emulator-1", "max_tokens": 256, "temperature": 0,
                       "messages": [{"role": "user", "content": REVIEW.text}], **extra}).encode()


def _schema_request_openai() -> bytes:
    return _openai_body(response_format={"type": "json_schema",
                                         "json_schema": {"name": "review", "schema": SCHEMA, "strict": True}})


def _schema_request_anthropic() -> bytes:
    return json.dumps({"model": "emulator-1", "max_tokens": 256, "messages": [{"role": "user", "content": REVIEW.text}],
                       "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}}).encode()


def _accepted(answer: dict) -> bool:
    """Every required property present, each value one the schema's enum or type allows."""
    properties = SCHEMA["properties"]
    if set(answer) != set(SCHEMA["required"]):
        return False
    for name, value in answer.items():
        rule = properties[name]
        if "enum" in rule and value not in rule["enum"]:
            return False
        if rule["type"] == "boolean" and not isinstance(value, bool):
            return False
    return True


@pytest.mark.parametrize("wire, body", [(openai_wire, _schema_request_openai()),
                                        (anthropic_wire, _schema_request_anthropic())])
def test_a_schema_request_is_answered_with_an_object_the_schema_accepts(wire, body) -> None:
    pipeline = Pipeline(base_behaviours(Scenario()))
    plans = [pipeline.plan(wire.parse_request(body, f"r{i}"), ALONE) for i in range(2)]
    answer = json.loads(plans[0].text)
    assert _accepted(answer)
    assert plans[0].text == plans[1].text            # temperature 0 and no load: the same bytes
    assert plans[0].truth["structured"] == {"answer": answer, "forked_field": None}


def test_json_object_mode_gets_an_object_and_plain_requests_stay_text() -> None:
    pipeline = Pipeline(base_behaviours(Scenario()))
    plan = pipeline.plan(openai_wire.parse_request(_openai_body(response_format={"type": "json_object"}), "r"), ALONE)
    assert isinstance(json.loads(plan.text)["answer"], str)
    plain = pipeline.plan(openai_wire.parse_request(_openai_body(), "p"), ALONE)
    with pytest.raises(ValueError):
        json.loads(plain.text)
    assert "structured" not in plain.truth


def test_a_forked_answer_stays_valid_and_differs_from_the_fork_on() -> None:
    # base_flip_rate 1: every request forks at its first near-tie, whatever the load.
    natural = Pipeline(base_behaviours(Scenario())).plan(openai_wire.parse_request(_schema_request_openai(), "n"),
                                                         ALONE)
    forking = Pipeline(base_behaviours(Scenario(nondeterminism={"base_flip_rate": 1.0})))
    plan = forking.plan(openai_wire.parse_request(_schema_request_openai(), "f"), ALONE)
    unforked, forked = json.loads(natural.text), json.loads(plan.text)
    first = plan.truth["structured"]["forked_field"]
    assert plan.truth["nondeterminism"]["forked_at_token"] is not None and first is not None
    names = list(SCHEMA["properties"])
    assert _accepted(forked)
    assert forked[names[first]] != unforked[names[first]]
    assert all(forked[name] == unforked[name] for name in names[:first])


def test_the_openai_sdk_parses_the_streamed_json() -> None:
    async def scenario():
        async with running(Scenario(decode_tokens_per_s=5000)) as emulator:
            client = openai.AsyncOpenAI(base_url=f"{emulator.base_url}/v1", api_key="x", max_retries=0)
            stream = await client.chat.completions.create(
                model="emulator-1", stream=True, max_tokens=256, temperature=0,
                messages=[{"role": "user", "content": REVIEW.text}],
                response_format={"type": "json_schema", "json_schema": {"name": "review", "schema": SCHEMA}})
            text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
            await client.close()
            return text

    assert _accepted(json.loads(run(scenario())))
