"""The penalty suite against a real llama-server, through the CLI (`prober run --suite penalty
--target local`), with a config whose `local` target points at the fixture's server.

- `/v1/chat/completions` with json_schema: a frequency penalty of 1.0 makes the grammar-bound model
  close the records array early (measured here: 25 asked, closed after 2), while every answer
  still parses.
- `/v1/messages` on the same server drops every penalty field (selfhosted-servers.md), so strong
  penalties change nothing: flagged `penalty_ignored`; the same penalties through
  `/v1/chat/completions` are applied, the negative control.
"""

import json

import pytest

from tests.support.cli import run_suite_on_local

pytestmark = [pytest.mark.real, pytest.mark.timeout(900)]

STRONG = "penalties={frequency_penalty = [1.5], presence_penalty = [1.5], repetition_penalty = [1.5]}"


def _run_suite(tmp_path, port, protocol, *params):
    return run_suite_on_local(tmp_path, port, "penalty", *params, protocol=protocol)


def _value(metrics, name, **labels):
    found = [m for m in metrics if m["name"] == name and all(m["labels"].get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]["value"]


def test_frequency_penalty_closes_the_constrained_array_early(tmp_path, llama_servers):
    server = llama_servers.get()
    rows, metrics = _run_suite(tmp_path, server.port, "openai", 'modes=["json_schema"]', "n_records=[12]",
                               "temperatures=[0.0]", "penalties={frequency_penalty = [1.0]}", "repeats=2",
                               "baseline_repeats=2", "max_tokens=300")
    assert len(rows) == 2 + 2 + 2
    penalised = [r for r in rows if r["labels"]["penalty"] == "frequency_penalty"]
    assert all(r["request_body"]["frequency_penalty"] == 1.0 and r["request_body"]["repeat_penalty"] == 1.0
               and r["request_body"]["response_format"]["type"] == "json_schema" for r in penalised)
    baseline = _value(metrics, "records_delivered", penalty="none")
    penalty = _value(metrics, "records_delivered", penalty="frequency_penalty")
    print(f"records delivered per request, 12 asked, max_tokens 300: baseline {baseline}, frequency 1.0 {penalty}")
    print([json.dumps(r["output_text"][:160]) for r in penalised])
    assert penalty < baseline
    # Under the grammar the early close is still valid JSON: a premature stop, not a parse failure.
    assert _value(metrics, "parse_rate", penalty="frequency_penalty") == 1
    assert _value(metrics, "premature_stop_rate", penalty="frequency_penalty") == 1
    assert _value(metrics, "value_drift_rate", penalty="frequency_penalty") == 1     # empty strings
    # The baseline is cut by max_tokens while still writing records: truncation, not corruption.
    assert _value(metrics, "truncation_rate", penalty="none") == 1
    assert _value(metrics, "corruption_rate", penalty="none") == 0
    assert _value(metrics, "penalty_effect", penalty="frequency_penalty") > 0


def test_messages_route_ignores_penalties_and_chat_route_applies_them(tmp_path, llama_servers):
    server = llama_servers.get()
    # 80 tokens: a presence penalty only acts once tokens repeat; at 48 its answers here still
    # equalled the baseline's on /v1/chat/completions too.
    params = ('modes=["unconstrained"]', "n_records=[3]", "temperatures=[0.0]", STRONG, "repeats=2",
              "baseline_repeats=3", "max_tokens=80")
    (tmp_path / "messages").mkdir()
    rows, metrics = _run_suite(tmp_path / "messages", server.port, "anthropic", *params)
    assert {r["url"].rsplit("/v1", 1)[1] for r in rows} == {"/messages"}
    assert all(r["request_body"]["presence_penalty"] == 1.5
               for r in rows if r["labels"]["penalty"] == "presence_penalty")
    ignored = {p: _value(metrics, "penalty_ignored", penalty=p)
               for p in ("frequency_penalty", "presence_penalty", "repetition_penalty")}
    unsupported = {p: _value(metrics, "penalty_unsupported", penalty=p) for p in ignored}
    print(f"/v1/messages: penalty_ignored {ignored}, penalty_unsupported {unsupported}")
    assert ignored == dict.fromkeys(ignored, 1)
    assert unsupported == dict.fromkeys(ignored, 0)          # accepted with a 200, then dropped
    assert _value(metrics, "penalties_applied_when_omitted") == 0

    (tmp_path / "chat").mkdir()
    rows, metrics = _run_suite(tmp_path / "chat", server.port, "openai", *params)
    applied = {p: _value(metrics, "penalty_ignored", penalty=p) for p in ignored}
    print(f"/v1/chat/completions: penalty_ignored {applied}")
    # The control: the same check says "applied" where llama-server does apply the penalty. Only
    # frequency and repetition serve: presence 1.5 penalizes each seen token once, and one clean-clone
    # run left all 80 tokens of both its answers equal to the baseline's (another run changed them).
    assert applied["frequency_penalty"] == 0 and applied["repetition_penalty"] == 0
