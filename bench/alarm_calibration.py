"""Alarm calibration: false pages and detection delay of the drift tests, SLO rules and alert
policy, by simulating nights of one target running the default nightly suite.

Each night is the metric rows the nightly suite's probes write (latency sweep, divergence,
caching, penalty, schema order; their sizes read from the built-in suite files), drawn with
night-to-night variation on top of sampling noise: every share wobbles around its level by the
noise level's sd (a beta distribution; shares at exactly 0 or 1, such as determinism at
concurrency 1, stay there), and latency has a night effect on the log scale shared by every
request of the night (correlated requests). The nights go through the real code: prober.alerting.drift
(run_values, target_tests, decide), prober.alerting.slo with the `prober init` rules, and prober.alerting.alerts
(drift_observations, slo_observations, judge), with the alert rows carried from night to night as
the store would. A page is an alert turning `firing`.

Per noise level, one long quiet history (a full baseline window of warm-up nights, then
`--nights` judged nights) gives the false pages per 90 nights. Regression histories branch off it
every few nights (`--histories` branch points, each with its own state and random stream): from
there one regression is injected and the nights until a page on the regressed metric are counted
(at most 6). Every regression is run at every noise level and the table shows them all; the
detection target is judged at REGRESSION_NOISE, the level the table names.

    python bench/alarm_calibration.py [--nights 1800] [--histories 120] [--seed 2] [--workers 3]

1800 nights and 120 histories (about 8 minutes on 2 idle cores, from 0.07 s a simulated night;
progress lines on stderr): the policy's rate near 0.8 false pages per 90 nights comes in clusters
(TTFT, ITL and end-to-end latency share the night effect: one false latency night is three
pages), so 900 nights measure it only to +- 0.3, and 80 histories measure a detection share near
0.95 to +- 0.025. The column "tests at 10x level / 10" (per 90 nights) estimates the same spend
from ten times as many events: the regression tests within NEAR_FACTOR times their level.

Ends with `alarm-calibration: false_pages_per_90_nights=X detected_within_2_nights=Y` (X the
worst over noise levels, Y the worst over regressions at REGRESSION_NOISE). Targets: X <= 1, Y >= 0.95.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tomllib
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prober.alerting.alerts import drift_observations, judge, slo_observations
from prober.alerting.drift import decide, run_values, target_tests
from prober.core import stats
from prober.core.config import ProberConfig

TARGET = "t"

# Noise levels: (name, sd of shares around their level, log-sd of latency between nights).
NOISE_LEVELS = [("low", 0.02, 0.10), ("mid", 0.05, 0.15), ("high", 0.08, 0.20)]
# The detection target is judged at the low noise level: at latency log-sd 0.15-0.20 a TTFT +50%
# (ln 1.5 = 0.405, 2.0-2.7 night sds) cannot be told from noise within two nights at this page
# budget (docs/operations.md); the table shows every regression at every level.
REGRESSION_NOISE = NOISE_LEVELS[0]
HORIZON = 6                      # nights a regression history runs at most
# Pages are rare, so their count over a few hundred nights says little; the regression tests that
# reach NEAR_FACTOR times their level are ten times as many and estimate the same spend (tails
# near the level are about linear in it): a tighter check of the budget, used by the CI test.
NEAR_FACTOR = 10


def _suite(name: str) -> dict[str, Any]:
    path = Path(__file__).resolve().parent.parent / "prober" / "suites" / f"{name}.toml"
    return tomllib.loads(path.read_text())["probes"][0]["params"]


LATENCY = _suite("latency")
LATENCY_LEVELS, LATENCY_REQUESTS = LATENCY["levels"], LATENCY["requests_per_level"]
DIVERGENCE = _suite("divergence")
# Divergence share by concurrency level: none alone, growing with the batch.
DIVERGENCE_LEVELS = dict(zip(DIVERGENCE["levels"], (0.0, 0.1, 0.2, 0.3)))
DIVERGENCE_PROMPTS, DIVERGENCE_REQUESTS = DIVERGENCE["prompts"], DIVERGENCE["requests_per_level"]
CACHING = _suite("caching")
CACHE_REQUESTS, CACHE_FANOUT = CACHING["requests"], CACHING["fanout_requests"]
PENALTY = _suite("penalty")
PENALTY_MODES, PENALTY_RECORDS, PENALTY_TEMPERATURES = PENALTY["modes"], PENALTY["n_records"], PENALTY["temperatures"]
PENALTY_REPEATS, PENALTY_BASELINE_REPEATS = PENALTY["repeats"], PENALTY["baseline_repeats"]
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
                for name, level_share in (("divergence_rate", share), ("modal_share", 1 - 0.8 * share),
                                          ("error_rate", 0.0)):
                    self.share("divergence", name, level_share, DIVERGENCE_REQUESTS, concurrency=level, prompt=prompt)

    def caching(self) -> None:
        # The first request of a repeat sequence writes the cache: K - 1 can hit.
        self.share("caching", "hit_rate", self.levels["cache_hit"], CACHE_REQUESTS - 1, case="repeat")
        for position, level in (("system_start", 0.0), ("system_middle", 0.0), ("before_breakpoint", 0.0),
                                ("user_turn", 1.0)):
            self.share("caching", "hit_rate", level, CACHE_REQUESTS, case="volatile", position=position)
        self.share("caching", "hit_rate", 0.9, CACHE_FANOUT, case="fanout")
        self.share("caching", "cache_read_reported", 1.0, 40, case="reporting")
        self.share("caching", "usage_consistent", 1.0, 40, case="reporting")

    def penalty(self) -> None:
        for mode in PENALTY_MODES:
            for records in PENALTY_RECORDS:
                for temperature in PENALTY_TEMPERATURES:
                    for (penalty, value), corruption in PENALTY_CELLS.items():
                        if (penalty, value) == ("frequency_penalty", 0.3):
                            corruption = self.levels["mild_penalty_corruption"]
                        n = PENALTY_BASELINE_REPEATS if penalty in ("none", "omitted") else PENALTY_REPEATS
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
    near_level: int = 0       # tonight's regression tests with p within NEAR_FACTOR times their level

    def copy(self) -> History:
        """An independent continuation (alert rows are replaced, never mutated, by `night`)."""
        return History(self.config, list(self.values), dict(self.alerts))

    def night(self, rows: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
        """Judge one night; returns the alert rows that turned firing (the pages)."""
        run = {"id": f"n{index}", "suite": "nightly", "targets": [TARGET]}
        window = self.config.drift.baseline_runs + 1
        now = run_values(rows)
        tests, _ = target_tests(TARGET, now, self.values[::-1][:window], self.config.drift)
        decided = decide(tests, self.config.drift)
        self.near_level = sum(1 for t in decided if t.direction != 0 and t.p_value is not None
                              and t.p_value <= NEAR_FACTOR * t.alpha)
        observations = slo_observations(self.config, rows, run) + drift_observations(decided, run)
        when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(days=index)
        changed, _, evaluation = judge(observations, self.alerts, run["id"], when)
        self.alerts.update({row["key"]: row for row in changed})
        # Only the newest window is ever read: a longer list would make every branch's copy and the
        # memory grow with the nights simulated.
        self.values = [*self.values[1 - window:], now] if window > 1 else [now]
        return evaluation.fired_now


def _regressed(regression: Regression) -> dict[str, Any]:
    levels = healthy_levels()
    regression.apply(levels)
    return levels


class LevelResult(NamedTuple):
    pages: list[str]                          # alert names paged over the quiet nights
    delays: dict[str, list[int | None]]       # per regression, nights to detection per history
    near_level: int                           # regression tests within NEAR_FACTOR of their level


def noise_level(config: ProberConfig, level: tuple[str, float, float], nights: int, histories: int, seed: int
                ) -> LevelResult:
    """One noise level: the alert names paged over `nights` quiet nights (after a full baseline
    window) and the tests near their level, and per regression the nights to detection of
    `histories` branches off that history."""
    _, share_sd, latency_sd = level
    rng = np.random.default_rng(seed)
    history, pages, near_level = History(config), [], 0
    warmup = config.drift.baseline_runs + 1
    every = max(1, nights // max(1, histories))
    delays: dict[str, list[int | None]] = {r.name: [] for r in REGRESSIONS}
    for index in range(warmup + nights):
        if index and index % 300 == 0:
            print(f"alarm-calibration: noise {level[0]}: night {index} of {warmup + nights}", file=sys.stderr,
                  flush=True)
        fired = history.night(Night(rng, share_sd, latency_sd, healthy_levels()).rows, index)
        if index < warmup:
            continue
        pages += [row["name"] for row in fired]
        near_level += history.near_level
        branch = index - warmup
        if branch % every == 0 and branch // every < histories:
            for offset, regression in enumerate(REGRESSIONS):
                branch_rng = np.random.default_rng([seed, branch, offset])
                delays[regression.name].append(
                    detection_delay(history.copy(), regression, branch_rng, share_sd, latency_sd, index))
    return LevelResult(pages, delays, near_level)


def detection_delay(history: History, regression: Regression, rng: np.random.Generator, share_sd: float,
                    latency_sd: float, index: int) -> int | None:
    """Nights from the first regressed night to a page on the regressed metric (1 = that night)."""
    for night in range(1, HORIZON + 1):
        fired = history.night(Night(rng, share_sd, latency_sd, _regressed(regression)).rows, index + night)
        if any(row["metric"] in regression.metrics for row in fired):
            return night
    return None


def _noise_level_job(args: tuple) -> LevelResult:
    return noise_level(default_config(), *args)


def calibrate(nights: int, histories: int, seed: int, workers: int = 3) -> tuple[list[str], float, float]:
    """(table lines, worst false pages per 90 nights, worst share detected within 2 nights at
    REGRESSION_NOISE)."""
    jobs = [(level, nights, histories, seed + offset) for offset, level in enumerate(NOISE_LEVELS)]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_noise_level_job, jobs))
    else:
        results = [_noise_level_job(job) for job in jobs]
    lines = ["noise (share sd, latency log-sd)   nights  false pages  per 90 nights  "
             "tests at 10x level / 10  paged by"]
    worst_rate = 0.0
    for (name, share_sd, latency_sd), result in zip(NOISE_LEVELS, results):
        names = result.pages
        rate = 90 * len(names) / nights
        worst_rate = max(worst_rate, rate)
        near = 90 * result.near_level / NEAR_FACTOR / nights
        paged = ", ".join(f"{n} x{names.count(n)}" for n in sorted(set(names))) or "-"
        lines.append(f"{name:>5} ({share_sd:.2f}, {latency_sd:.2f})                {nights:>6}  {len(names):>11}  "
                     f"{rate:>13.2f}  {near:>23.2f}  {paged}")
    lines.append("")
    header = "".join(f"  {name + (' *' if name == REGRESSION_NOISE[0] else ''):>16}" for name, _, _ in NOISE_LEVELS)
    lines.append(f"{'regression: detected within 2 nights (median nights)':<52}  histories{header}")
    worst_share = 1.0
    for regression in REGRESSIONS:
        cells = []
        for (name, _, _), result in zip(NOISE_LEVELS, results):
            found = result.delays[regression.name]
            within = sum(1 for d in found if d is not None and d <= 2) / len(found)
            detected = [d for d in found if d is not None]
            median = f"{statistics.median(detected):g}" if detected else "never"
            cells.append(f"{within:.2f} ({median})")
            if name == REGRESSION_NOISE[0]:
                worst_share = min(worst_share, within)
        lines.append(f"{regression.name:<52}  {len(found):>9}" + "".join(f"  {c:>16}" for c in cells))
    lines.append(f"* the detection target is judged at noise {REGRESSION_NOISE[0]}; median over the histories "
                 f"detected within {HORIZON} nights")
    return lines, worst_rate, worst_share


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=1800, help="quiet nights per noise level")
    parser.add_argument("--histories", type=int, default=120, help="regression histories per regression and level")
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--workers", type=int, default=3, help="processes (one noise level each)")
    args = parser.parse_args(argv)
    lines, rate, share = calibrate(args.nights, args.histories, args.seed, args.workers)
    print("\n".join(lines))
    print(f"alarm-calibration: false_pages_per_90_nights={rate:.2f} detected_within_2_nights={share:.2f}")
    return 0 if rate <= 1 and share >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
