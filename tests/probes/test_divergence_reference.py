"""Item 6 of issue 12: the divergence trend test keeps its level when every concurrency level has
the same output distribution, because every level is measured against a reference drawn apart
from the levels' own outputs (the reference sample). Simulated through the probe's own summarize
with the suite's default grid (levels 1, 4, 16, 64; 32, 32, 32 and 64 requests; 8 reference
requests) and the three distributions of the audit.

Measured with 3,000 runs each (other seeds than the test's): false-positive rate at p <= 0.05 with the
reference 4.8% (two answers at 0.5), 4.0% (four: 0.3, 0.3, 0.2, 0.2), 4.2% (0.2 and eight at 0.1);
taking the reference from the lowest level's own outputs, as before, 8.5%, 11.9% and 16.1%."""

from __future__ import annotations

import numpy as np
import pytest

from prober.core.probe_registry import get_probe
from prober.probes.divergence import DivergenceParams
from prober.store.rows import output_fields

pytestmark = pytest.mark.unit

PROBE = get_probe("divergence")
PARAMS = DivergenceParams(prompts=["story"])          # the suite's defaults: levels 1, 4, 16, 64
DISTRIBUTIONS = {"two": [0.5, 0.5], "four": [0.3, 0.3, 0.2, 0.2], "nine": [0.2] + [0.1] * 8}
RUNS = 1000


def _row(text: str, level: int, phase: str) -> dict:
    return {"probe": "divergence", "final": True, "labels": {"concurrency": level, "prompt": "story", "phase": phase},
            **output_fields(text, None), "chunk_chars": [], "usage": None, "extra": {}, "system_fingerprint": None,
            "error_type": None, "rejected_params": []}


def _run_rows(rng: np.random.Generator, distribution: list[float], *, reference_from_lowest: bool = False
              ) -> list[dict]:
    """One run's samples: every request's answer drawn from the same distribution, at every level.
    `reference_from_lowest`: the reference sample is the lowest level's own outputs, which is the
    old method (its mode was the reference), to show that this simulation catches it."""
    def answers(n: int) -> list[str]:
        return [f"answer {i}" for i in rng.choice(len(distribution), size=n, p=distribution)]

    levels = {level: answers(PARAMS.requests_at(level)) for level in PARAMS.levels}
    reference = levels[PARAMS.levels[0]] if reference_from_lowest else answers(PARAMS.reference_requests)
    rows = [_row(text, 1, "reference") for text in reference]
    for level, texts in levels.items():
        rows += [_row(text, level, "measure") for text in texts]
    return rows


def _trend_p(rows: list[dict]) -> float:
    (p,) = [m.value for m in PROBE.summarize(rows, PARAMS, run_id="r", target="t")
            if m.name == "divergence_trend_p_value"]
    return p


@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_trend_test_keeps_its_level_when_no_level_differs(name):
    # 1,000 runs: the standard error at 5% is 0.69 points, so a true rate of 5% stays under the
    # 6.5% bound (2.2 standard errors), while the old method's 8.5-16% rates exceed it
    # (8.5% is 2.9 standard errors above 6.5%).
    rng = np.random.default_rng(2026 + len(name))
    rejected = sum(_trend_p(_run_rows(rng, DISTRIBUTIONS[name])) <= 0.05 for _ in range(RUNS))
    assert rejected / RUNS <= 0.065, f"{rejected} of {RUNS} runs called a rising trend"


def test_the_simulation_catches_a_reference_taken_from_the_lowest_level():
    # The same runs with the lowest level's outputs as the reference sample (the old method) call
    # a rising trend far more often than 6.5%, with two equally likely answers, the mildest case.
    rng = np.random.default_rng(7)
    rejected = sum(_trend_p(_run_rows(rng, DISTRIBUTIONS["two"], reference_from_lowest=True)) <= 0.05
                   for _ in range(RUNS))
    assert rejected / RUNS > 0.065, f"{rejected} of {RUNS} runs"
