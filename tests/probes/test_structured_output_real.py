"""Structured output against a real llama-server: /v1/messages drops `output_config`, so the
divergence suite's review_json prompt is answered in prose there and every answer carries
`structured_output_ignored`; /v1/chat/completions honours `response_format` (a grammar), so the
same prompt's answers are JSON there. Both through the real CLI (`prober run --suite divergence`)."""

import pytest

from tests.support.cli import run_suite_on_local

pytestmark = pytest.mark.real

PARAMS = ('prompts=["review_json"]', "levels=[1]", "requests_per_level=4", "max_tokens=160")


def _rate(metric_rows, name):
    (row,) = [m for m in metric_rows if m["name"] == name and m["labels"].get("prompt") == "review_json"]
    return row["value"], row["n"]


@pytest.mark.parametrize(("protocol", "ignored"), [("anthropic", True), ("openai", False)])
def test_llama_servers_messages_route_ignores_output_config_and_prober_says_so(tmp_path, llama_servers,
                                                                               protocol, ignored):
    server = llama_servers.get()
    rows, metric_rows = run_suite_on_local(tmp_path, server.port, "divergence", *PARAMS, protocol=protocol,
                                           timeout=1800)
    measured = [r for r in rows if r["labels"]["phase"] == "measure"]
    assert len(measured) == 4
    asked = "output_config" if protocol == "anthropic" else "response_format"
    assert all(asked in r["request_body"] for r in measured)
    flagged = [r for r in measured if any(f.startswith("structured_output_ignored") for f in r["findings"] or [])]
    value, n = _rate(metric_rows, "structured_output_ignored_rate")
    print(f"{protocol}: structured_output_ignored on {len(flagged)} of {len(measured)}; rate {value} (n={n})")
    assert n == len(measured)
    assert value == pytest.approx(len(flagged) / len(measured))
    if ignored:
        # Prose on /v1/messages (the model may still happen to open with JSON now and then).
        assert flagged and all(not r["output_text"].lstrip().startswith("{") for r in flagged)
    else:
        assert flagged == [] and value == 0.0
