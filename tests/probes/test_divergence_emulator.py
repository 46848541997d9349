"""The emulator's concurrency-dependent nondeterminism, and the divergence suite end to end against
it, checked against the emulator's own ground truth."""

from collections import defaultdict

import pytest

from prober.core.errors import ConfigError
from prober.core.probe_registry import get_probe
from prober.emulator import Scenario, load_scenario
from prober.emulator.behaviours import Pipeline, ServerState, base_behaviours
from prober.emulator.nondeterminism import divergence_probability, flip_probability
from prober.emulator.plan import GenRequest, PromptBlock
from prober.probes.divergence import DivergenceParams
from prober.store.rows import output_fields
from tests.support.emulated import run_suite_on_emulator

pytestmark = pytest.mark.emulator

LEVELS = [1, 4, 16, 64]


def _scenario(**nondeterminism) -> Scenario:
    seed = nondeterminism.pop("seed", 0)
    return Scenario.model_validate({"output_tokens": 48, "slots": 64, "seed": seed,
                                    "nondeterminism": nondeterminism})


def _plan(pipeline: Pipeline, prompt: str, seq: int, batch: int, max_tokens: int = 40):
    request = GenRequest(protocol="openai", request_id=f"r{seq}", model="m", stream=True, max_tokens=max_tokens,
                         blocks=[PromptBlock("messages", prompt, role="user")])
    return pipeline.plan(request, ServerState(seq=seq, in_flight=batch - 1, active=batch - 1, queued=0))


def test_scenario_keys_and_errors(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("[nondeterminism]\nflip_rate_per_extra_request = 0.02\nnear_ties = 5\nbase_flip_rate = 0.01\n")
    settings = load_scenario(path).nondeterminism
    assert (settings.flip_rate_per_extra_request, settings.near_ties, settings.base_flip_rate) == (0.02, 5, 0.01)
    assert Scenario().nondeterminism.flip_rate_per_extra_request == 0      # off by default
    path.write_text("[nondeterminism]\nflip_rate = 0.02\n")
    with pytest.raises(ConfigError, match="nondeterminism.flip_rate"):
        load_scenario(path)


def test_flip_probability_grows_with_the_batch_and_is_zero_alone():
    settings = _scenario(flip_rate_per_extra_request=0.02).nondeterminism
    assert flip_probability(settings, 1) == 0
    assert flip_probability(settings, 4) == pytest.approx(0.06)
    assert flip_probability(settings, 100) == 1.0
    assert divergence_probability(settings, 4, 8) == pytest.approx(1 - 0.94 ** 8)


def test_outputs_never_fork_alone_and_fork_into_deterministic_continuations():
    pipeline = Pipeline(base_behaviours(_scenario(flip_rate_per_extra_request=0.05)))
    alone = {_plan(pipeline, "Tell a story.", seq, batch=1).text for seq in range(200)}
    assert len(alone) == 1
    natural = alone.pop()
    forks: dict[int, str] = {}
    for seq in range(300):
        plan = _plan(pipeline, "Tell a story.", seq, batch=16)
        truth = plan.truth["nondeterminism"]
        assert truth["batch_size"] == 16 and truth["flip_probability"] == pytest.approx(0.75)
        at = truth["forked_at_token"]
        if at is None:
            assert plan.text == natural
            continue
        natural_tokens = _plan(pipeline, "Tell a story.", 0, batch=1).tokens
        assert plan.tokens[:at] == natural_tokens[:at] and plan.tokens[at] != natural_tokens[at]
        assert len(plan.tokens) == len(natural_tokens) == plan.usage.output_tokens
        assert forks.setdefault(at, plan.text) == plan.text     # same fork position, same continuation
    assert len(forks) >= 3


def test_the_batch_is_capped_by_the_slots():
    pipeline = Pipeline(base_behaviours(Scenario.model_validate(
        {"slots": 4, "nondeterminism": {"flip_rate_per_extra_request": 0.1}})))
    assert _plan(pipeline, "x", 0, batch=64).truth["nondeterminism"]["batch_size"] == 4


def _simulated_rows(pipeline: Pipeline, seed_offset: int, sizes: dict[int, int], reference: int,
                    prompt: str = "Tell a story."):
    """Sample rows as the probe would store them, with the emulator planning each request at the
    level's batch size (the steady state of a closed loop with that many in flight), after
    `reference` requests sent alone (the reference sample)."""
    rows, seq = [], seed_offset
    for phase, level, count in [("reference", 1, reference), *(("measure", lv, n) for lv, n in sizes.items())]:
        for _ in range(count):
            plan = _plan(pipeline, prompt, seq, batch=level)
            seq += 1
            rows.append({"probe": "divergence", "final": True, "error_type": None, "rejected_params": [],
                         "labels": {"concurrency": level, "prompt": "story", "phase": phase},
                         "system_fingerprint": None, "usage": None, "chunk_chars": [], "extra": {},
                         **output_fields(plan.text, None)})
    return rows


def _trend_p(metrics) -> float:
    (p,) = [m.value for m in metrics if m.name == "divergence_trend_p_value"]
    return p


def test_trend_test_is_quiet_in_95_percent_of_seeds_when_divergence_does_not_grow():
    """The emulator diverging at the same rate at every level (a base rate only, as on an endpoint
    that is never deterministic): the summarized trend p-value stays above 0.05 in >= 95% of seeds."""
    probe, params = get_probe("divergence"), DivergenceParams(prompts=["story"])
    sizes = {level: params.requests_at(level) for level in LEVELS}
    seeds = 300
    quiet = 0
    for seed in range(seeds):
        pipeline = Pipeline(base_behaviours(_scenario(base_flip_rate=0.01, near_ties=8, seed=seed)))
        metrics = probe.summarize(_simulated_rows(pipeline, 0, sizes, params.reference_requests), params,
                                  run_id="r", target="t")
        quiet += _trend_p(metrics) > 0.05
    assert quiet >= 0.95 * seeds, f"{seeds - quiet} of {seeds} seeds gave p <= 0.05"


# --- end to end: the suite through the runner against `prober emulate` ---------------------------

# Divergence growing with concurrency. Each level's Wilson interval misses its truth 5% of the time by
# design, so over 8 intervals some scenario seeds miss one; this seed's draws leave every interval
# a margin of about 0.05 around its truth, run after run (the batch sizes vary a little with timing).
GROWING = ("first_token_delay_ms = 5\nprefill_ms_per_token = 0\ndecode_tokens_per_s = 2000\noutput_tokens = 48\n"
           "slots = 64\nseed = 6\n[nondeterminism]\nflip_rate_per_extra_request = 0.01\nnear_ties = 8\n")


def _run(tmp_path, scenario, protocol, overrides):
    return run_suite_on_emulator(tmp_path, scenario, protocol, "divergence", overrides)


def _by_name(metrics):
    return {(m["name"], m["labels"].get("prompt"), m["labels"].get("concurrency")): m for m in metrics}


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_measured_divergence_matches_ground_truth_and_the_trend_is_found(tmp_path, protocol):
    rows, metrics, truth = _run(tmp_path, GROWING, protocol,
                                {"prompts": ["story", "list"], "max_tokens": 40, "requests_per_level": 32})
    m = _by_name(metrics)
    forks = defaultdict(list)
    probabilities = defaultdict(list)
    for row in rows:
        assert row["error_type"] is None
        body = row["request_body"]
        assert body["temperature"] == 0.0 and body["max_tokens"] == 40
        assert ("seed" in body) == (protocol == "openai")
        key = (row["labels"]["prompt"], row["labels"]["concurrency"])
        record = truth[row["request_id"]]["behaviours"]["nondeterminism"]
        forks[key].append(record["forked_at_token"])
        probabilities[key].append(record["divergence_probability"])
    for prompt in ("story", "list"):
        assert set(forks[prompt, 1]) == {None}          # never alone: level 1 is the reference
        for level in LEVELS:
            rate = m["divergence_rate", prompt, level]
            assert rate["n"] == max(32, level)
            # What the prober measured is what the emulator did, request for request...
            forked = [at for at in forks[prompt, level] if at is not None]
            assert rate["value"] * rate["n"] == pytest.approx(len(forked))
            if forked:
                assert m["first_divergence_token_min", prompt, level]["value"] == min(forked)
            # ...and the emulator's divergence probability lies within the measured rate's interval.
            expected = sum(probabilities[prompt, level]) / len(probabilities[prompt, level])
            assert rate["ci_low"] <= expected <= rate["ci_high"], (prompt, level, expected, rate)
        assert m["unique_outputs", prompt, 1]["value"] == 1
        assert m["unique_outputs", prompt, 64]["value"] > 1
        assert m["divergence_trend_p_value", prompt, None]["value"] < 0.01
        assert m["divergence_exact_p_value", prompt, None]["value"] < 0.01
        assert m["system_fingerprints", prompt, 4]["value"] == (1 if protocol == "openai" else 0)


def test_no_trend_when_divergence_does_not_depend_on_concurrency(tmp_path):
    scenario = GROWING.replace("flip_rate_per_extra_request = 0.01", "base_flip_rate = 0.01")
    _, metrics, _ = _run(tmp_path, scenario, "openai", {"prompts": ["story"], "max_tokens": 40,
                                                        "requests_per_level": 32})
    m = _by_name(metrics)
    assert m["divergence_trend_p_value", "story", None]["value"] > 0.05
    assert m["divergence_exact_p_value", "story", None]["value"] > 0.05


def test_background_load_is_stored_apart_and_raises_divergence_at_level_one(tmp_path):
    rows, metrics, truth = _run(tmp_path, GROWING, "openai", {"prompts": ["story"], "levels": [1, 4],
                                                              "max_tokens": 40, "requests_per_level": 24,
                                                              "background_concurrency": 3})
    background = [r for r in rows if r["labels"]["phase"] == "background"]
    assert background and {r["case"] for r in background} == {"background"}
    assert len({r["request_body"]["messages"][0]["content"] for r in background}) == len(background)
    measured = [r for r in rows if r["labels"]["phase"] == "measure"]
    assert len(measured) == 48
    # The measured level-1 requests shared the server with the filler: their batches were bigger than 1.
    batches = [truth[r["request_id"]]["behaviours"]["nondeterminism"]["batch_size"] for r in measured
               if r["labels"]["concurrency"] == 1]
    assert max(batches) > 1
    m = _by_name(metrics)
    assert m["divergence_rate", "story", 1]["n"] == 24
