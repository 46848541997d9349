"""Request shapes and traces: drawn lengths follow their distributions, seeds replay, files parse in
every accepted layout, and a bad file is one ConfigError naming the file and the line."""

import json

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import stats as sps

from prober.core.errors import ConfigError
from prober.probes.latency import LatencyParams, shaped_request
from prober.probes.shapes import LengthShape, ShapeSampler, load_dataset, load_trace
from prober.suites.loader import load_suite

pytestmark = pytest.mark.unit

N = 4000


def _sampler(input_shape, output_shape=None, seed=0, dataset=None):
    return ShapeSampler(input_shape=LengthShape.model_validate(input_shape),
                        output_shape=LengthShape.model_validate(output_shape or {"value": 16}),
                        dataset=dataset, seed=seed)


def test_uniform_lengths_fit_a_discrete_uniform():
    sampler = _sampler({"kind": "uniform", "low": 10, "high": 19})
    drawn = [sampler.shape(i).input_tokens for i in range(N)]
    counts = np.bincount(np.array(drawn) - 10, minlength=10)
    assert counts.size == 10 and min(drawn) == 10 and max(drawn) == 19
    assert sps.chisquare(counts).pvalue > 0.001


def test_normal_lengths_fit_their_normal_and_respect_the_clip():
    sampler = _sampler({"kind": "normal", "mean": 500, "std": 80})
    drawn = np.array([sampler.shape(i).input_tokens for i in range(N)], dtype=float)
    # Undo the rounding with a uniform jitter, then test the continuous law.
    jitter = np.random.default_rng(7).uniform(-0.5, 0.5, N)
    assert sps.kstest(drawn + jitter, sps.norm(500, 80).cdf).pvalue > 0.001

    clipped = _sampler({"kind": "normal", "mean": 100, "std": 200, "min": 20, "max": 150})
    values = [clipped.shape(i).input_tokens for i in range(N)]
    assert min(values) == 20 and max(values) == 150      # both clips reached, nothing beyond them


def test_input_and_output_lengths_are_drawn_independently():
    sampler = _sampler({"kind": "uniform", "low": 1, "high": 1000},
                       {"kind": "uniform", "low": 1, "high": 1000})
    shapes = [sampler.shape(i) for i in range(N)]
    rho = sps.spearmanr([s.input_tokens for s in shapes], [s.output_tokens for s in shapes])
    assert rho.pvalue > 0.001


def test_the_same_seed_and_index_give_the_same_shape_whatever_else_is_drawn():
    spec = {"kind": "normal", "mean": 300, "std": 100}
    first = _sampler(spec, seed=5)
    again = _sampler(spec, seed=5)
    forward = [first.shape(i) for i in range(50)]
    backward = [again.shape(i) for i in reversed(range(50))][::-1]
    assert forward == backward
    other = [_sampler(spec, seed=6).shape(i) for i in range(50)]
    assert other != forward


@pytest.mark.parametrize("spec, message", [
    ({"kind": "fixed"}, "needs value"),
    ({"kind": "uniform", "low": 5}, "needs high"),
    ({"kind": "uniform", "low": 9, "high": 5}, r"low \(9\) is above high \(5\)"),
    ({"kind": "normal", "mean": 5}, "needs std"),
    ({"kind": "normal", "mean": 5, "std": 1, "min": 9, "max": 3}, r"min \(9\) is above max \(3\)"),
    ({"kind": "lognormal", "mean": 5}, "kind"),
    ({"kind": "fixed", "value": 3, "typo": 1}, "typo"),
])
def test_an_incomplete_shape_is_refused(spec, message):
    with pytest.raises(ValidationError, match=message):
        LatencyParams.model_validate({"input_shape": spec})


def _write(path, lines):
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def test_a_dataset_gives_lengths_or_prompts_drawn_evenly_with_replacement(tmp_path):
    data = _write(tmp_path / "shapes.jsonl", [
        {"input_tokens": 100, "output_tokens": 10},
        "",
        {"input_length": 200, "output_length": 20},
        {"prompt": "Tell me about rivers.", "output_tokens": 30},
        {"prompt": "Name three birds."},
    ])
    rows = load_dataset(data)
    assert [(r.input_tokens, r.output_tokens, r.prompt) for r in rows] == [
        (100, 10, None), (200, 20, None), (None, 30, "Tell me about rivers."), (None, None, "Name three birds.")]
    assert rows[1].source == "shapes.jsonl:3"

    sampler = _sampler({"value": 1}, {"kind": "fixed", "value": 99}, dataset=rows)
    shapes = [sampler.shape(i) for i in range(N)]
    counts = np.bincount([rows.index(next(r for r in rows if r.source == s.source)) for s in shapes], minlength=4)
    assert sps.chisquare(counts).pvalue > 0.001
    # A prompt without its own answer length takes the output shape's; its input length is left
    # absent (the endpoint's usage counts it), not stored as 0.
    birds = next(s for s in shapes if s.prompt == "Name three birds.")
    assert birds.as_extra() == {"output_tokens": 99, "source": "shapes.jsonl:5", "prompt_chars": 17}
    request = shaped_request(birds, 0.0)
    assert request.messages[0]["content"].endswith("] Name three birds.") and request.max_tokens == 99


def test_a_shaped_request_sends_its_lengths_and_stores_them(tmp_path):
    shape = _sampler({"value": 40}, {"value": 7}).shape(0)
    request = shaped_request(shape, 0.0)
    assert request.max_tokens == 7
    assert len(request.messages[0]["content"].split()) >= 40
    assert request.stored_extra == {"shape": {"input_tokens": 40, "output_tokens": 7, "source": "drawn"}}
    assert "shape" not in request.extra                 # stored, never sent


def test_the_three_trace_layouts_give_the_same_schedule(tmp_path):
    prober_layout = _write(tmp_path / "p.jsonl", [
        {"timestamp_ms": 1000, "input_tokens": 50, "output_tokens": 5},
        {"timestamp_ms": 1250, "input_tokens": 60, "output_tokens": 6},
        {"timestamp_ms": 1250, "input_tokens": 70, "output_tokens": 7},
        {"timestamp_ms": 3000, "input_tokens": 80, "output_tokens": 8}])
    mooncake = _write(tmp_path / "m.jsonl", [
        {"timestamp": 0, "input_length": 50, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 250, "input_length": 60, "output_length": 6, "hash_ids": [0, 2]},
        {"timestamp": 250, "input_length": 70, "output_length": 7, "hash_ids": [3]},
        {"timestamp": 2000, "input_length": 80, "output_length": 8, "hash_ids": [4]}])
    azure = tmp_path / "a.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:46.0000000,50,5\n2023-11-16 18:15:46.2500000,60,6\n"
                     "2023-11-16 18:15:46.2500000,70,7\n2023-11-16 18:15:48.0000000,80,8\n")
    expected = [(0.0, 50, 5), (0.25, 60, 6), (0.25, 70, 7), (2.0, 80, 8)]
    for path in (prober_layout, mooncake, azure):
        trace = load_trace(path)
        assert [(pytest.approx(t.offset_s), t.input_tokens, t.output_tokens) for t in trace] == expected, path
    assert [t.offset_s for t in load_trace(mooncake, time_scale=0.5)] == pytest.approx([0, 0.125, 0.125, 1.0])


def test_a_trace_out_of_order_is_replayed_in_arrival_order(tmp_path):
    path = _write(tmp_path / "t.jsonl", [
        {"timestamp_ms": 500, "input_tokens": 2, "output_tokens": 2},
        {"timestamp_ms": 100, "input_tokens": 1, "output_tokens": 1}])
    trace = load_trace(path)
    assert [(t.offset_s, t.input_tokens, t.source) for t in trace] == [(0.0, 1, "t.jsonl:2"), (0.4, 2, "t.jsonl:1")]


@pytest.mark.parametrize("lines, message", [
    (["{not json"], r"t.jsonl: line 1: not valid JSON"),
    ([{"timestamp_ms": 0, "input_tokens": 5, "output_tokens": 1}, [1, 2]], r"line 2: each line must be a JSON object"),
    ([{"timestamp_ms": 0, "input_tokens": -5, "output_tokens": 1}], r"line 1: input_tokens: must be a whole number"),
    ([{"timestamp_ms": 0, "input_tokens": 5}], r"line 1: no output_tokens / output_length / GeneratedTokens"),
    ([{"input_tokens": 5, "output_tokens": 1}], r"line 1: no timestamp_ms / timestamp / TIMESTAMP"),
    ([{"timestamp_ms": "soon", "input_tokens": 5, "output_tokens": 1}], r"timestamp_ms: must be a number"),
    (["", "  "], r"the trace file has no requests"),
    (["time,in,out", "1,2,3"], r"line 1: neither a JSON object nor the Azure trace header"),
    (["TIMESTAMP,ContextTokens,GeneratedTokens", "yesterday,5,1"], r"line 2: TIMESTAMP: not a date and time"),
    (["TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:15:46,five,1"],
     r"line 2: ContextTokens: must be a whole number"),
])
def test_a_bad_trace_is_one_clear_config_error(tmp_path, lines, message):
    path = _write(tmp_path / "t.jsonl", lines)
    with pytest.raises(ConfigError, match=message):
        load_trace(path)


def test_a_missing_or_bad_dataset_is_one_clear_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"nowhere.jsonl: dataset file not found"):
        load_dataset(tmp_path / "nowhere.jsonl")
    with pytest.raises(ConfigError, match=r"line 1: prompt: must be a non-empty string"):
        load_dataset(_write(tmp_path / "d.jsonl", [{"prompt": ""}]))
    with pytest.raises(ConfigError, match=r"line 1: no input_tokens / input_length / ContextTokens"):
        load_dataset(_write(tmp_path / "d.jsonl", [{"output_tokens": 3}]))
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match=r"bin.jsonl: cannot read dataset"):
        load_dataset(tmp_path / "bin.jsonl")


def test_the_suite_loader_reads_shape_files_next_to_the_suite_and_reports_them_as_config_errors(tmp_path):
    suites = tmp_path / "suites"
    suites.mkdir()
    _write(suites / "mix.jsonl", [{"input_tokens": 11, "output_tokens": 3}])
    (suites / "shaped.toml").write_text('[[probes]]\nprobe = "latency"\n[probes.params]\nshapes_file = "mix.jsonl"\n')
    suite = load_suite("shaped", [suites])
    params = suite.entries[0].params
    assert params.shape_sampler(128, 64).shape(0).input_tokens == 11

    (suites / "broken.toml").write_text('[[probes]]\nprobe = "latency"\n[probes.params]\n'
                                        'trace_file = "missing.jsonl"\n')
    with pytest.raises(ConfigError, match=r"missing.jsonl: trace file not found"):
        load_suite("broken", [suites])
