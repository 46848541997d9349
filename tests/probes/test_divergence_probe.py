"""The divergence probe's parameters, requests and summary, on canned sample rows."""

import json

import pytest
from pydantic import ValidationError

from prober.core.errors import ConfigError
from prober.core.probe_registry import get_probe
from prober.probes.divergence import (
    DivergenceParams,
    build_request,
    common_prefix_length,
    output_token_pieces,
)
from prober.store.rows import output_fields
from prober.suites.loader import load_suite

pytestmark = pytest.mark.unit

PROBE = get_probe("divergence")


def _row(text, level, prompt="story", *, chunks=None, usage=None, fingerprint="fp_a", error=None,
         rejected=None, phase="measure", final=True):
    """A stored sample row as `store.Store.samples` returns it (the fields the probe reads)."""
    return {"probe": "divergence", "final": final,
            "labels": {"concurrency": level, "prompt": prompt, "phase": phase},
            **output_fields(text, None), "chunk_chars": chunks or [], "usage": usage, "extra": {},
            "system_fingerprint": fingerprint, "error_type": error, "rejected_params": rejected or []}


def _metrics(rows, **params):
    params.setdefault("prompts", ["story", "review_json"])
    metrics = PROBE.summarize(rows, DivergenceParams(**params), run_id="r", target="t")
    return {(m.name, json.dumps(m.labels, sort_keys=True)): m for m in metrics}


def _key(name, **labels):
    return name, json.dumps(labels, sort_keys=True)


def test_params_defaults_and_validation():
    params = DivergenceParams()
    assert params.levels == [1, 4, 16, 64] and params.requests_per_level == 32 and params.max_tokens == 256
    assert params.reference_requests == 8
    assert [p.name for p in params.selected_prompts()] == ["story", "list", "explain", "review_json"]
    assert params.requests_at(1) == 32 and params.requests_at(64) == 64
    custom = DivergenceParams(prompts=["story"], custom_prompts=[{"name": "mine", "text": "Say hi."}])
    assert [p.name for p in custom.selected_prompts()] == ["story", "mine"]
    for bad, fragment in [({"prompts": ["nope"]}, "unknown prompt 'nope'"),
                          ({"custom_prompts": [{"name": "story", "text": "x"}]}, "prompt name used twice: story"),
                          ({"prompts": []}, "no prompts"),
                          ({"levels": [0, 4]}, "positive integers"),
                          ({"custom_prompts": [{"name": "x", "txt": "typo"}]}, "txt")]:
        with pytest.raises(ValidationError, match=fragment):
            DivergenceParams(**bad)


def test_suite_file_loads_and_nightly_includes_it(tmp_path):
    (entry,) = load_suite("divergence", []).entries
    assert entry.probe.name == "divergence" and entry.params.levels == [1, 4, 16, 64]
    assert "divergence" in [e.probe.name for e in load_suite("nightly", []).entries]
    (tmp_path / "mine.toml").write_text('[[probes]]\nprobe = "divergence"\n[probes.params]\nprompts = ["bogus"]\n')
    with pytest.raises(ConfigError, match=r"mine.toml: probes\[0\]\.params\.prompts"):
        load_suite("mine", [str(tmp_path)])


def test_requests_send_temperature_everywhere_and_seed_only_where_the_protocol_has_one():
    params = DivergenceParams(logprobs=True)
    story, review = params.selected_prompts()[0], params.selected_prompts()[3]
    openai = build_request(story, params, "openai")
    assert openai.sampling == {"temperature": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0, "seed": 1234,
                               "logprobs": True}
    assert openai.max_tokens == 256 and openai.json_schema is None
    assert build_request(story, params, "anthropic").sampling == {"temperature": 0.0}
    structured = build_request(review, params, "anthropic")
    assert structured.json_schema["schema"]["required"] == ["sentiment", "rating", "would_recommend", "praise",
                                                            "complaint"]


def test_divergence_against_reference_and_modal_with_first_positions():
    a, b, c = "The keeper woke.", "The keeper slept.", "A keeper woke."
    rows = [_row(a, 1, phase="reference") for _ in range(3)] + [_row(a, 1) for _ in range(4)]
    rows += [_row(a, 4), _row(b, 4), _row(b, 4), _row(b, 4), _row(c, 4)]
    rows += [_row("ignored", 4, phase="background"), _row("ignored", 4, final=False, error="server_error")]
    m = _metrics(rows)
    assert m[_key("unique_outputs", prompt="story", concurrency=1)].value == 1
    assert m[_key("divergence_rate", prompt="story", concurrency=1)].value == 0
    assert m[_key("unique_outputs", prompt="story", concurrency=4)].value == 3
    rate = m[_key("divergence_rate", prompt="story", concurrency=4)]
    assert rate.value == pytest.approx(4 / 5) and rate.n == 5 and rate.ci_low < 0.8 < rate.ci_high
    assert m[_key("modal_share", prompt="story", concurrency=4)].value == pytest.approx(3 / 5)
    assert m[_key("divergence_rate_vs_modal", prompt="story", concurrency=4)].value == pytest.approx(2 / 5)
    # b parts from a at character 11 ("s" for "w"), c at character 0.
    assert m[_key("first_divergence_char_min", prompt="story", concurrency=4)].value == 0
    assert m[_key("first_divergence_char_median", prompt="story", concurrency=4)].value == 11
    assert m[_key("first_divergence_char_min", prompt="story", concurrency=1)].value is None
    # No token information in these rows: no token metrics.
    assert _key("first_divergence_token_min", prompt="story", concurrency=4) not in m
    assert m[_key("system_fingerprints", prompt="story", concurrency=4)].value == 1
    assert m[_key("system_fingerprint_requests", fingerprint="fp_a")].value == 9     # measured requests only
    assert m[_key("reference_modal_share", prompt="story")].value == 1
    assert m[_key("divergence_trend_p_value", prompt="story")].value < 0.05
    exact = m[_key("divergence_exact_p_value", prompt="story", versus="1-4")]
    assert exact.value == pytest.approx(5 / 126)   # 4 of 5 versus 0 of 4: C(5,4) / C(9,4)


def test_reference_is_the_modal_output_of_the_reference_sample_not_of_a_tested_level():
    # The reference sample's mode is a (2 of 3, a failed request left out); level 1's own mode is
    # b, and level 1 is measured against a like every other level.
    a, b = "alpha beta", "alpha gamma"
    rows = [_row(a, 1, phase="reference"), _row(b, 1, phase="reference"), _row(a, 1, phase="reference"),
            _row("", 1, phase="reference", error="timeout"),
            _row(b, 1), _row(a, 1), _row(b, 1), _row("", 1, error="timeout"),
            _row(a, 8, fingerprint="fp_b"), _row(b, 8)]
    m = _metrics(rows, levels=[1, 8])
    assert m[_key("reference_modal_share", prompt="story")].value == pytest.approx(2 / 3)
    assert m[_key("divergence_rate", prompt="story", concurrency=1)].value == pytest.approx(2 / 3)
    assert m[_key("error_rate", prompt="story", concurrency=1)].value == pytest.approx(1 / 4)
    assert m[_key("divergence_rate", prompt="story", concurrency=8)].value == pytest.approx(1 / 2)
    assert m[_key("system_fingerprints", prompt="story", concurrency=8)].value == 2
    assert m[_key("system_fingerprint_requests", fingerprint="fp_b")].value == 1


def test_token_positions_come_from_single_token_chunks_or_logprobs():
    text_a, text_b = "Once upon a time", "Once upon the time"
    chunks = [4, 5, 2, 5]
    rows = [_row(text_a, 1, chunks=chunks, usage={"completion_tokens": 4}, phase=phase)
            for phase in ("reference", "measure") for _ in range(3)]
    rows.append(_row(text_b, 4, chunks=[4, 5, 4, 5], usage={"completion_tokens": 4}))
    logprob_row = _row(text_b, 4)
    logprob_row["extra"] = {"logprobs": [{"token": t} for t in ["Once", " upon", " the", " time"]]}
    rows.append(logprob_row)
    m = _metrics(rows, levels=[1, 4])
    assert m[_key("first_divergence_token_min", prompt="story", concurrency=4)].value == 2
    assert m[_key("first_divergence_token_median", prompt="story", concurrency=4)].value == 2
    assert m[_key("first_divergence_char_min", prompt="story", concurrency=4)].value == 10
    # Chunks that are not one token each (usage disagrees) tell nothing about tokens.
    assert output_token_pieces(_row(text_a, 1, chunks=chunks, usage={"output_tokens": 5})) is None
    assert output_token_pieces(_row(text_a, 1, chunks=chunks, usage={"output_tokens": 4})) == \
        ["Once", " upon", " a", " time"]
    assert common_prefix_length("abc", "abd") == 2 and common_prefix_length("ab", "abc") == 2


def test_structured_prompt_reports_field_agreement_apart_from_bytes():
    ref = '{"sentiment": "mixed", "rating": 3, "would_recommend": true, "summary": "Strong but loud."}'
    same_meaning = '{"rating": 3, "sentiment": "mixed", "would_recommend": true, "summary": "Strong but loud."}'
    other_summary = '{"sentiment": "mixed", "rating": 3, "would_recommend": true, "summary": "Loud, strong."}'
    rows = [_row(ref, 1, "review_json", phase=phase) for phase in ("reference", "measure") for _ in range(3)]
    rows += [_row(ref, 4, "review_json"), _row(same_meaning, 4, "review_json"),
             _row(other_summary, 4, "review_json"), _row('{"sentiment": "mix', 4, "review_json")]
    m = _metrics(rows, levels=[1, 4])
    labels = {"prompt": "review_json", "concurrency": 4}
    assert m[_key("divergence_rate", **labels)].value == pytest.approx(3 / 4)        # bytes
    assert m[_key("semantic_divergence_rate", **labels)].value == pytest.approx(2 / 4)
    assert m[_key("json_valid_rate", **labels)].value == pytest.approx(3 / 4)
    assert m[_key("field_agreement", field="sentiment", **labels)].value == pytest.approx(3 / 4)
    assert m[_key("field_agreement", field="summary", **labels)].value == pytest.approx(2 / 4)
    assert m[_key("semantic_divergence_rate", prompt="review_json", concurrency=1)].value == 0
    # Plain-text prompts get no JSON metrics.
    assert not [k for k in m if k[0] == "json_valid_rate" and '"story"' in k[1]]


def test_without_a_reference_sample_nothing_is_measured_against_a_reference():
    # A run stored before the reference sample existed: no reference, so no divergence rate and
    # no trend test; the per-level descriptive metrics remain.
    rows = [_row("x", 1), _row("x", 1), _row("y", 4), _row("x", 4)]
    m = _metrics(rows, levels=[1, 4])
    assert not [k for k in m if k[0] in ("divergence_rate", "divergence_trend_p_value", "reference_modal_share")]
    assert m[_key("divergence_rate_vs_modal", prompt="story", concurrency=4)].value == pytest.approx(1 / 2)


def test_rejected_parameters_are_counted():
    rows = [_row("x", 1, rejected=["temperature"]), _row("x", 1, rejected=["temperature"])]
    m = _metrics(rows, levels=[1])
    assert m[_key("rejected_param_requests", param="temperature")].value == 2
    assert _key("divergence_trend_p_value", prompt="story") not in m      # one level: no trend
