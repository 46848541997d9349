"""Alarm calibration: false pages and detection delay of the drift tests, SLO rules and alert
policy, by simulating nights of one target running the default nightly suite.

Each night is the metric rows the nightly suite's probes write (latency sweep, divergence,
caching, penalty, schema order), drawn with night-to-night variation on top of sampling noise:
every share wobbles around its level by the noise level's sd (a beta distribution; shares at
exactly 0 or 1, such as determinism at concurrency 1, stay there), and latency has a night effect
on the log scale shared by every request of the night (correlated requests). The nights go
through the real code: reports.drift (run_values, target_tests, decide), reports.slo with the
`prober init` rules, and reports.alerts (drift_observations, slo_observations, judge), with the
alert rows carried from night to night as the store would. A page is an alert turning `firing`.

Noise-only histories give false pages per 90 nights per noise level; separate histories with one
injected regression each (starting after a full baseline of quiet nights) give the share detected
within 2 nights and the median nights to detection (a page on the regressed metric).

    python bench/alarm_calibration.py [--nights 300] [--histories 40] [--seed 1]

Ends with `alarm-calibration: false_pages_per_90_nights=X detected_within_2_nights=Y` (X the
worst over noise levels, Y the worst over regressions). Targets: X <= 1, Y >= 0.95.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prober import stats  # noqa: E402
from prober.config import DriftConfig, ProberConfig  # noqa: E402
from reports.alerts import drift_observations, judge, slo_observations  # noqa: E402
from reports.drift import decide, run_values, target_tests  # noqa: E402

TARGET = "t"

# Noise levels: (name, sd of shares around their level, log-sd of latency between nights).
NOISE_LEVELS = [("low", 0.02, 0.10), ("mid", 0.05, 0.15), ("high", 0.08, 0.20)]
# Regressions are injected at the middle noise level.
REGRESSION_NOISE = NOISE_LEVELS[1]

LATENCY_LEVELS = [1, 2, 4, 8, 16, 32]
LATENCY_REQUESTS = 32
DIVERGENCE_LEVELS = {1: 0.0, 4: 0.1, 16: 0.2, 64: 0.3}       # divergence share by concurrency
DIVERGENCE_PROMPTS = ["story", "list", "explain", "review_json"]
PENALTY_MODES = ["unconstrained", "json_object", "json_schema"]
PENALTY_RECORDS = [10, 40, 100]
PENALTY_TEMPERATURES = [0.0, 0.2]
# (penalty, value): corruption share of the cell; "none" is the explicit no-op baseline.
PENALTY_CELLS = {("none", 0): 0.0, ("omitted", 0): 0.0, ("frequency_penalty", 0.3): 0.0,
                 ("frequency_penalty", 1.0): 0.3, ("presence_penalty", 0.5): 0.0, ("presence_penalty", 1.5): 0.2,
                 ("repetition_penalty", 1.1): 0.0, ("repetition_penalty", 1.3): 0.4}
SCHEMA_ITEMS = 300
SCHEMA_ACCURACY = {"answer_first": 0.90, "reasoning_first": 0.88}


@dataclass(frozen=True)
class Regression:
    name: str
    metrics: frozenset[str]          # alert metrics whose page counts as detecting it
    apply: Callable[[dict[str, Any]], None]


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(levels: dict[str, Any]) -> None:
        levels[key] = value
    return apply


REGRESSIONS = [
    Regression("cache hit rate 0.95 -> 0.6", frozenset({"hit_rate"}), _set("cache_hit", 0.6)),
    Regression("TTFT p50 +50%", frozenset({"ttft_ms", "ttft_p50_ms"}), _set("ttft_factor", 1.5)),
    Regression("divergence +0.3 at c=64", frozenset({"divergence_rate"}), _set("divergence_top_shift", 0.3)),
    Regression("JSON corruption 0 -> 0.2 (frequency_penalty 0.3)", frozenset({"corruption_rate"}),
               _set("mild_penalty_corruption", 0.2)),
    Regression("schema-order accuracy -0.15", frozenset({"accuracy", "paired_difference"}),
               _set("schema_shift", -0.15)),
    Regression("error rate 0 -> 0.1", frozenset({"error_rate"}), _set("error_rate", 0.1)),
]


def healthy_levels() -> dict[str, Any]:
    return {"cache_hit": 0.95, "ttft_factor": 1.0, "divergence_top_shift": 0.0, "mild_penalty_corruption": 0.0,
            "schema_shift": 0.0, "error_rate": 0.0}


class Night:
    """One night's metric rows for the target, drawn with the given noise."""

    def __init__(self, rng: np.random.Generator, share_sd: float, latency_sd: float, levels: dict[str, Any]):
        self.rng, self.share_sd, self.levels = rng, share_sd, levels
        self.rows: list[dict[str, Any]] = []
        self.latency(latency_sd)
        self.divergence()
        self.caching()
        self.penalty()
        self.schema_order()

    def night_share(self, level: float) -> float:
        """The night's true share: a beta around `level` with the noise sd (capped where a share
        near 0 or 1 cannot spread that far); 0 and 1 are structural and stay."""
        if level <= 0 or level >= 1:
            return float(min(1.0, max(0.0, level)))
        sd = min(self.share_sd, 0.6 * (level * (1 - level)) ** 0.5)
        strength = level * (1 - level) / sd ** 2 - 1
        return float(self.rng.beta(level * strength, (1 - level) * strength))

    def share(self, probe: str, name: str, level: float, n: int, **labels: Any) -> None:
        x = int(self.rng.binomial(n, self.night_share(level)))
        value, low, high = stats.proportion(x, n)
        self.rows.append({"target": TARGET, "probe": probe, "name": name, "labels": labels, "value": value,
                          "ci_low": low, "ci_high": high, "n": n, "unit": "ratio"})

    def value(self, probe: str, name: str, value: float | None, n: int, unit: str, **labels: Any) -> None:
        self.rows.append({"target": TARGET, "probe": probe, "name": name, "labels": labels, "value": value,
                          "n": n, "unit": unit})

    def latency(self, latency_sd: float) -> None:
        night = self.rng.normal(0, latency_sd)            # shared by every request tonight
        for level in LATENCY_LEVELS:
            ttft = np.exp(np.log(40 * (1 + level / 8) * self.levels["ttft_factor"]) + night
                          + self.rng.normal(0, 0.3, LATENCY_REQUESTS))
            itl = np.exp(np.log(8 * (1 + level / 32)) + night + self.rng.normal(0, 0.2, LATENCY_REQUESTS))
            e2e = ttft + 63 * itl
            for name, values in (("ttft", ttft), ("itl", itl), ("e2e", e2e)):
                self.value("latency", f"{name}_p50_ms", stats.percentile(list(values), 50), LATENCY_REQUESTS, "ms",
                           concurrency=level)
                self.value("latency", f"{name}_p99_ms", stats.percentile(list(values), 99), LATENCY_REQUESTS, "ms",
                           concurrency=level)
            self.share("latency", "error_rate", self.levels["error_rate"], LATENCY_REQUESTS, concurrency=level)
            self.share("latency", "goodput", 0.97 - self.levels["error_rate"], LATENCY_REQUESTS, concurrency=level)

    def divergence(self) -> None:
        for prompt in DIVERGENCE_PROMPTS:
            for level, share in DIVERGENCE_LEVELS.items():
                if level == max(DIVERGENCE_LEVELS):
                    share += self.levels["divergence_top_shift"]
                self.share("divergence", "divergence_rate", share, 32, concurrency=level, prompt=prompt)
                self.share("divergence", "modal_share", 1 - 0.8 * share, 32, concurrency=level, prompt=prompt)
                self.share("divergence", "error_rate", 0.0, 32, concurrency=level, prompt=prompt)

    def caching(self) -> None:
        self.share("caching", "hit_rate", self.levels["cache_hit"], 7, case="repeat")
        for position, level in (("system_start", 0.0), ("system_middle", 0.0), ("before_breakpoint", 0.0),
                                ("user_turn", 1.0)):
            self.share("caching", "hit_rate", level, 8, case="volatile", position=position)
        self.share("caching", "hit_rate", 0.9, 8, case="fanout")
        self.share("caching", "cache_read_reported", 1.0, 40, case="reporting")
        self.share("caching", "usage_consistent", 1.0, 40, case="reporting")

    def penalty(self) -> None:
        for mode in PENALTY_MODES:
            for records in PENALTY_RECORDS:
                for temperature in PENALTY_TEMPERATURES:
                    for (penalty, value), corruption in PENALTY_CELLS.items():
                        if (penalty, value) == ("frequency_penalty", 0.3):
                            corruption = self.levels["mild_penalty_corruption"]
                        n = 4 if penalty in ("none", "omitted") else 3
                        labels = {"mode": mode, "n_records": records, "temperature": temperature,
                                  "penalty": penalty, "penalty_value": value}
                        self.share("penalty", "corruption_rate", corruption, n, **labels)
                        self.share("penalty", "parse_rate", 1 - corruption / 2, n, **labels)
                        self.share("penalty", "truncation_rate", corruption / 3, n, **labels)
                        self.share("penalty", "error_rate", 0.0, n, **labels)
        self.value("penalty", "penalties_applied_when_omitted", 0.0, 144, "bool")

    def schema_order(self) -> None:
        p_a = self.night_share(SCHEMA_ACCURACY["answer_first"])
        p_b = self.night_share(SCHEMA_ACCURACY["reasoning_first"]) + self.levels["schema_shift"]
        # Most items are right under both orders; a few (0.05) only under one of them.
        both = max(0.0, min(p_a, p_b) - 0.05, p_a + p_b - 1)
        cells = np.clip([both, p_a - both, p_b - both, 1 - p_a - p_b + both], 0, 1)
        cells = self.rng.multinomial(SCHEMA_ITEMS, cells / cells.sum())
        right_a, right_b = int(cells[0] + cells[1]), int(cells[0] + cells[2])
        for variant, right in (("answer_first", right_a), ("reasoning_first", right_b)):
            value, low, high = stats.proportion(right, SCHEMA_ITEMS)
            self.rows.append({"target": TARGET, "probe": "schema_order", "name": "accuracy",
                              "labels": {"variant": variant}, "value": value, "ci_low": low, "ci_high": high,
                              "n": SCHEMA_ITEMS, "unit": "ratio"})
        pair = {"a": "answer_first", "b": "reasoning_first"}
        a_only, b_only = int(cells[1]), int(cells[2])
        difference, low, high = stats.paired_difference(a_only, b_only, SCHEMA_ITEMS)
        self.value("schema_order", "discordant_a_only", a_only, SCHEMA_ITEMS, "items", **pair)
        self.value("schema_order", "discordant_b_only", b_only, SCHEMA_ITEMS, "items", **pair)
        self.rows.append({"target": TARGET, "probe": "schema_order", "name": "paired_difference", "labels": pair,
                          "value": difference, "ci_low": low, "ci_high": high, "n": SCHEMA_ITEMS, "unit": "ratio"})


def default_config() -> ProberConfig:
    """The `prober init` SLO rules and drift settings (targets and sinks are not needed here)."""
    example = tomllib.loads((Path(__file__).resolve().parent.parent / "prober" / "data" / "example.toml").read_text())
    return ProberConfig.model_validate({key: example[key] for key in ("slo", "drift") if key in example})


@dataclass
class History:
    """Nights of one target through the drift tests, SLO rules and alert states."""

    config: ProberConfig
    values: list[dict] = field(default_factory=list)      # run_values per night, newest last
    alerts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def night(self, rows: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
        """Judge one night; returns the alert rows that turned firing (the pages)."""
        run = {"id": f"n{index}", "suite": "nightly", "targets": [TARGET]}
        window = self.config.drift.baseline_runs + 1
        now = run_values(rows)
        tests, _ = target_tests(TARGET, now, self.values[::-1][:window], self.config.drift)
        observations = (slo_observations(self.config, rows, run)
                        + drift_observations(decide(tests, self.config.drift), run))
        when = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(days=index)
        changed, _, evaluation = judge(observations, self.alerts, run["id"], when)
        self.alerts.update({row["key"]: row for row in changed})
        self.values.append(now)
        return evaluation.fired_now


def false_pages(config: ProberConfig, share_sd: float, latency_sd: float, nights: int, seed: int
                ) -> tuple[int, list[str]]:
    """Pages over `nights` quiet nights after a full baseline window, and the alert names that paged."""
    rng = np.random.default_rng(seed)
    history, pages = History(config), []
    warmup = config.drift.baseline_runs + 1
    for index in range(warmup + nights):
        fired = history.night(Night(rng, share_sd, latency_sd, healthy_levels()).rows, index)
        if index >= warmup:
            pages += [row["name"] for row in fired]
    return len(pages), pages


def nights_to_detection(config: ProberConfig, regression: Regression, seed: int, horizon: int = 6) -> int | None:
    """Nights from the first regressed night to a page on the regressed metric (1 = that night)."""
    rng = np.random.default_rng(seed)
    _, share_sd, latency_sd = REGRESSION_NOISE
    history = History(config)
    warmup = config.drift.baseline_runs + 1
    for index in range(warmup):
        history.night(Night(rng, share_sd, latency_sd, healthy_levels()).rows, index)
    regressed = healthy_levels()
    regression.apply(regressed)
    for night in range(1, horizon + 1):
        fired = history.night(Night(rng, share_sd, latency_sd, regressed).rows, warmup + night)
        if any(row["metric"] in regression.metrics for row in fired):
            return night
    return None


def calibrate(config: ProberConfig, nights: int, histories: int, seed: int) -> tuple[list[str], float, float]:
    """(table lines, worst false pages per 90 nights, worst share detected within 2 nights)."""
    lines = ["noise (share sd, latency log-sd)   nights  false pages  per 90 nights  paged by"]
    worst_rate = 0.0
    for offset, (name, share_sd, latency_sd) in enumerate(NOISE_LEVELS):
        count, names = false_pages(config, share_sd, latency_sd, nights, seed + offset)
        rate = 90 * count / nights
        worst_rate = max(worst_rate, rate)
        paged = ", ".join(f"{n} x{names.count(n)}" for n in sorted(set(names))) or "-"
        lines.append(f"{name:>5} ({share_sd:.2f}, {latency_sd:.2f})                {nights:>6}  {count:>11}  "
                     f"{rate:>13.2f}  {paged}")
    lines.append("")
    lines.append(f"regression (noise {REGRESSION_NOISE[0]})                          histories  within 2 nights  "
                 "median nights")
    worst_share = 1.0
    for offset, regression in enumerate(REGRESSIONS):
        delays = [nights_to_detection(config, regression, seed + 1000 * (offset + 1) + h) for h in range(histories)]
        within = sum(1 for d in delays if d is not None and d <= 2) / histories
        found = [d for d in delays if d is not None]
        median = f"{statistics.median(found):g}" if found else "never"
        worst_share = min(worst_share, within)
        lines.append(f"{regression.name:<52}  {histories:>9}  {within:>15.2f}  {median:>13}")
    return lines, worst_rate, worst_share


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=300, help="quiet nights per noise level")
    parser.add_argument("--histories", type=int, default=40, help="histories per regression")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    lines, rate, share = calibrate(default_config(), args.nights, args.histories, args.seed)
    print("\n".join(lines))
    print(f"alarm-calibration: false_pages_per_90_nights={rate:.2f} detected_within_2_nights={share:.2f}")
    return 0 if rate <= 1 and share >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
