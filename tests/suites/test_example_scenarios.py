"""Each example scenario (examples/scenarios/) shows its effect in its suite's metrics: the suite
runs against an in-process emulator with the scenario and with the default one, and the metric
the scenario is about moves as its README says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from prober.core.config import ProberConfig
from prober.run.runner import Runner
from prober.store import Store
from tests.support.cli import prober

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(600)]

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def _run(tmp_path: Path, suite: str, scenario: str | None, protocol: str, overrides: dict[str, Any]
         ) -> dict[tuple[str, tuple[tuple[str, Any], ...]], float | None]:
    """The run's metrics: (name, sorted labels) -> value."""
    emulator = {"scenario": str(SCENARIOS / scenario)} if scenario else {}
    db = tmp_path / f"{suite}-{scenario or 'default'}.db"
    config = ProberConfig.model_validate({
        "targets": {"emu": {"protocol": protocol, "model": "emulator-1", "emulator": emulator}},
        "store": {"url": f"sqlite:///{db}"}, "runner": {"progress": False}})
    result = Runner(config).run(suite, None, overrides)
    assert result.status == "complete", result.problems
    with Store.open(config.store.url) as store:
        rows = store.metrics(result.run_id)
    return {(r["name"], tuple(sorted((r["labels"] or {}).items()))): r["value"] for r in rows}


def _value(metrics: dict, name: str, **labels: Any) -> float | None:
    return metrics[(name, tuple(sorted(labels.items())))]


def test_nondeterministic_under_load_makes_divergence_grow_with_concurrency(tmp_path) -> None:
    overrides = {"levels": [1, 8], "requests_per_level": 24, "reference_requests": 4, "max_tokens": 64,
                 "prompts": ["story", "review_json"]}
    loaded = _run(tmp_path, "divergence", "nondeterministic_under_load.toml", "openai", overrides)
    default = _run(tmp_path, "divergence", None, "openai", overrides)
    for prompt in ("story", "review_json"):
        assert _value(loaded, "divergence_rate", concurrency=1, prompt=prompt) == 0
        assert _value(default, "divergence_rate", concurrency=8, prompt=prompt) == 0
        # 1 - (1 - 7 x 0.03)^8 = 0.85 with 8 in flight, less while the first wave ramps up (1, 2, ...
        # in flight): 0.3 is far below what the level gives, and far above the default's 0.
        assert _value(loaded, "divergence_rate", concurrency=8, prompt=prompt) >= 0.3
        assert _value(loaded, "divergence_trend_p_value", prompt=prompt) < 0.01
    # JSON answers stay JSON; their fields, not only their bytes, disagree.
    assert _value(loaded, "json_valid_rate", concurrency=8, prompt="review_json") == 1
    fields = ["sentiment", "rating", "would_recommend", "praise", "complaint"]
    assert min(_value(loaded, "field_agreement", concurrency=8, prompt="review_json", field=f) for f in fields) < 1
    assert all(_value(default, "field_agreement", concurrency=8, prompt="review_json", field=f) == 1
               for f in fields)


def test_volatile_system_prompt_breaks_the_cache(tmp_path) -> None:
    overrides = {"cases": ["repeat"], "requests": 6, "max_tokens": 8}
    broken = _run(tmp_path, "caching", "volatile_system_prompt.toml", "anthropic", overrides)
    default = _run(tmp_path, "caching", None, "anthropic", overrides)
    assert _value(default, "hit_rate", case="repeat") == 1
    assert _value(broken, "hit_rate", case="repeat") == 0
    cost = {"case": "repeat", "ttl": "5m", "writes": "reported"}
    assert _value(default, "cost_multiplier", **cost) < 1 < _value(broken, "cost_multiplier", **cost)


def test_gateway_penalty_is_found_as_a_penalty_applied_when_omitted(tmp_path) -> None:
    overrides = {"modes": ["json_object"], "n_records": [40], "temperatures": [0.0], "repeats": 1,
                 "baseline_repeats": 4, "penalties": {"frequency_penalty": [1.0]}}
    injected = _run(tmp_path, "penalty", "gateway_penalty.toml", "openai", overrides)
    default = _run(tmp_path, "penalty", None, "openai", overrides)
    cell = {"mode": "json_object", "n_records": 40, "temperature": 0.0}
    assert _value(injected, "penalties_applied_when_omitted", **cell) == 1
    assert _value(default, "penalties_applied_when_omitted", **cell) == 0


def test_regression_fires_the_drill(tmp_path) -> None:
    done = prober("drill", "--scenario", str(SCENARIOS / "regression.toml"), cwd=tmp_path, timeout=500)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "drill run 5/5: REGRESSED emulator, the given scenario" in output
    assert "FIRING [critical] drill_ttft_p50" in output
