"""Drift: did this run's metrics move away from the spread of earlier comparable runs?

The night (run) is the unit. A real endpoint varies from night to night (load, routing, cache
state, model revisions); pooling the requests of all baseline runs into one sample reads that
variation as drift (issue 12: one metric alarmed on 9-21% of quiet nights). So each metric
contributes one value per run, and tonight's value is judged against the values of the baseline
runs, whose spread includes the night-to-night variation. Baseline: per suite entry, the previous
`baseline_runs` runs of the same suite in which the target completed and the entry measured the
same thing (reports/baseline.py); with none comparable the entry is not tested and
`baseline_resets` says what changed.

- proportion: a metric with n and a Wilson interval and a value in [0, 1] (error rate, hit rate,
  divergence rate, accuracy...), counts rebuilt as round(value * n). A quasi-binomial test
  (stats.share_change_p): binomial variance scaled by the overdispersion the baseline runs show.
  Effect: the difference of the shares (absolute).
- latency: the run's p50 of TTFT, end-to-end time and ITL (ttft_p50_ms, e2e_p50_ms, itl_p50_ms)
  on the log scale, against the Student-t prediction interval of the baseline runs' log p50s
  (stats.night_prediction_p). Effect: the relative change of the geometric mean.
- paired: schema_order's paired accuracy difference (discordant_a_only - discordant_b_only) / n
  per run, against the prediction interval of the baseline runs' differences, the spread floored
  at tonight's own paired sampling variance. Its within-run McNemar p-value is not a drift test:
  a difference that has always been there would alert every night. Effect: the change of the
  paired difference.

Two windows per metric: tonight against the previous `baseline_runs` runs, and the mean of
tonight and the previous run against the `baseline_runs` runs before that one, which sees a
sustained change with less noise than either night alone. The p-values of one target's run are
adjusted together by Benjamini-Hochberg; a test fires when its q-value is within `[drift] fdr`
and its effect reaches the minimum effect for its kind (or its metric name), so that a tiny
shift on a large sample stays quiet. docs/operations.md ("Alerting") gives the measured false
pages and detection delays (bench/alarm_calibration.py). A metric row with `flags` (too poorly
estimated to judge) is left out; metrics without a per-run distribution (counts, throughput,
costs) are left to SLO rules.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from prober import stats
from prober.config import DriftConfig
from reports.baseline import completed_targets, select_baselines
from reports.slo import format_value, labels_key

# Defaults for `[drift] min_effect`: absolute share, relative median change, paired difference.
DEFAULT_MIN_EFFECT = {"proportion": 0.05, "latency": 0.20, "paired": 0.05}

# The run-level latency metrics tested, and the quantity each stands for (the alert's metric).
LATENCY_FAMILIES = {"ttft_p50_ms": "ttft_ms", "e2e_p50_ms": "e2e_ms", "itl_p50_ms": "itl_ms"}

# A baseline that happened to agree to within 1% must not make any change significant.
LATENCY_LOG_VARIANCE_FLOOR = 0.01 ** 2

# The tests need a spread: a prediction interval on fewer than 3 baseline runs has 1 degree of freedom.
FEWEST_BASELINE_RUNS = 3


@dataclass(frozen=True)
class DriftTest:
    kind: str                      # "proportion" | "latency" | "paired"
    target: str
    probe: str
    metric: str
    labels: dict[str, Any]
    p_value: float | None
    effect: float | None           # signed; see the module docstring for its unit per kind
    baseline: float | None         # pooled share, geometric mean (ms), or mean paired difference
    current: float | None          # the same over the tested nights
    n_current: int
    n_baseline: int
    baseline_runs: int
    nights: int = 1                # 1: tonight alone; 2: tonight and the previous run together
    min_effect: float = 0.0
    q_value: float | None = None
    detected: bool = False

    @property
    def key(self) -> str:
        return f"drift|{self.target}|{self.probe}|{self.metric}|{labels_key(self.labels)}"

    @property
    def summary(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        if self.kind == "latency":
            change = f"{self.effect:+.0%}" if self.effect is not None else "?"
            moved = f"p50 {format_value(self.current)} ms vs {format_value(self.baseline)} ms ({change})"
        elif self.kind == "paired":
            moved = f"paired difference {format_value(self.current)} vs {format_value(self.baseline)}"
        else:
            moved = f"{format_value(self.current)} vs {format_value(self.baseline)}"
        when = "tonight" if self.nights == 1 else f"last {self.nights} runs"
        q = "-" if self.q_value is None else f"{self.q_value:.2g}"
        return (f"drift: {self.target} {self.probe} {self.metric}{f' ({where})' if where else ''}: {moved} "
                f"({when}) against {self.baseline_runs} baseline runs (q={q})")


@dataclass
class DriftOutcome:
    """A run's decided tests, and one line per target or metric group that could not be tested."""

    tests: list[DriftTest] = field(default_factory=list)
    not_tested: list[str] = field(default_factory=list)


def min_effect_for(kind: str, metric: str, config: DriftConfig) -> float:
    return config.min_effect.get(metric, config.min_effect.get(kind, DEFAULT_MIN_EFFECT[kind]))


def decide(tests: Sequence[DriftTest], config: DriftConfig) -> list[DriftTest]:
    """Benjamini-Hochberg across the tests of each target, then the minimum effect."""
    by_target: dict[str, list[int]] = defaultdict(list)
    for index, test in enumerate(tests):
        by_target[test.target].append(index)
    q_values: list[float | None] = [None] * len(tests)
    for indices in by_target.values():
        for index, q in zip(indices, stats.benjamini_hochberg([tests[i].p_value for i in indices])):
            q_values[index] = q
    decided = []
    for test, q in zip(tests, q_values):
        floor = min_effect_for(test.kind, test.metric, config)
        detected = (q is not None and q <= config.fdr and test.effect is not None
                    and abs(test.effect) >= floor - 1e-12)
        decided.append(replace(test, q_value=q, min_effect=floor, detected=detected))
    return decided


# --- one value per run and metric ---------------------------------------------------------------

# Differences of two shares carry unit "ratio" and an interval too, but are not a share of n.
DIFFERENCE_METRICS = frozenset({"paired_difference", "penalty_effect"})


def judgeable(row: dict[str, Any]) -> bool:
    """A row with a value and no flags (a flagged value is too poorly estimated to judge)."""
    value = row.get("value")
    return not row.get("flags") and value is not None and not math.isnan(value)


def is_proportion(row: dict[str, Any]) -> bool:
    """A share of n trials with its Wilson interval: value * n is a whole count."""
    value, n = row.get("value"), row.get("n")
    if (row.get("unit") != "ratio" or row.get("name") in DIFFERENCE_METRICS or not n or not judgeable(row)
            or not 0.0 <= value <= 1.0 or row.get("ci_low") is None):
        return False
    return abs(value * n - round(value * n)) < 1e-6 * n


@dataclass(frozen=True)
class RunValue:
    """One metric's value in one run: `value` (share, log p50 or paired difference), the counts
    behind a share, and the sampling variance of a paired difference."""

    value: float
    successes: int = 0
    n: int = 0
    sampling_variance: float = 0.0


Identity = tuple[str, str, str, str]          # (kind, probe, metric, labels key)


def run_values(rows: Iterable[dict[str, Any]]) -> dict[Identity, tuple[RunValue, dict[str, Any]]]:
    """Every testable metric of one run's rows of one target, with its labels."""
    found: dict[Identity, tuple[RunValue, dict[str, Any]]] = {}
    rows = list(rows)
    for row in rows:
        labels = row.get("labels") or {}
        if is_proportion(row):
            x = round(row["value"] * row["n"])
            found[("proportion", row["probe"], row["name"], labels_key(labels))] = (
                RunValue(row["value"], x, int(row["n"])), labels)
        elif row["name"] in LATENCY_FAMILIES and judgeable(row) and row["value"] > 0:
            found[("latency", row["probe"], LATENCY_FAMILIES[row["name"]], labels_key(labels))] = (
                RunValue(math.log(row["value"]), n=int(row.get("n") or 0)), labels)
    for (probe, key), ((a, b, n), labels) in _discordant(rows).items():
        variance = ((a + b) - (a - b) ** 2 / n) / n ** 2
        found[("paired", probe, "paired_difference", key)] = (RunValue((a - b) / n, n=n, sampling_variance=variance),
                                                             labels)
    return found


def _discordant(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str], tuple[tuple[int, int, int], dict[str, Any]]]:
    """((a_only, b_only, items), labels) per paired comparison (probe, labels key) of one run."""
    found: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    for row in rows:
        if row["name"] in ("discordant_a_only", "discordant_b_only", "paired_difference") and not row.get("flags"):
            found[(row["probe"], labels_key(row.get("labels")))][row["name"]] = row
    counts = {}
    for group, named in found.items():
        if len(named) == 3 and named["paired_difference"].get("n") and \
                all(named[k].get("value") is not None for k in ("discordant_a_only", "discordant_b_only")):
            counts[group] = ((round(named["discordant_a_only"]["value"]), round(named["discordant_b_only"]["value"]),
                              int(named["paired_difference"]["n"])), named["paired_difference"].get("labels") or {})
    return counts


# --- the night-level test of one metric -----------------------------------------------------------

def night_test(kind: str, target: str, probe: str, metric: str, labels: dict[str, Any],
               current: Sequence[RunValue], baseline: Sequence[RunValue]) -> DriftTest:
    """The mean of `current` (tonight, or tonight and the previous run) against `baseline`."""
    m, k = len(current), len(baseline)
    if kind == "proportion":
        x, n = sum(v.successes for v in current), sum(v.n for v in current)
        base_x, base_n = [v.successes for v in baseline], [v.n for v in baseline]
        p = stats.share_change_p(x, n, base_x, base_n)
        now, before = x / n, sum(base_x) / sum(base_n)
        return DriftTest(kind, target, probe, metric, labels, p, now - before, before, now, n, sum(base_n), k, m)
    floor = (LATENCY_LOG_VARIANCE_FLOOR if kind == "latency"
             else max(v.sampling_variance for v in current))
    p, _ = stats.night_prediction_p([v.value for v in current], [v.value for v in baseline], floor)
    now, before = sum(v.value for v in current) / m, sum(v.value for v in baseline) / k
    n_now, n_before = sum(v.n for v in current), sum(v.n for v in baseline)
    if kind == "latency":
        return DriftTest(kind, target, probe, metric, labels, p, math.exp(now - before) - 1, math.exp(before),
                         math.exp(now), n_now, n_before, k, m)
    return DriftTest(kind, target, probe, metric, labels, p, now - before, before, now, n_now, n_before, k, m)


def target_tests(target: str, current: dict[Identity, tuple[RunValue, dict[str, Any]]],
                 baseline: Sequence[dict[Identity, tuple[RunValue, dict[str, Any]]]],
                 config: DriftConfig) -> tuple[list[DriftTest], int]:
    """Tonight's tests of one target (undecided) and how many metrics had too few baseline runs.

    Arguments are `run_values` of tonight and of the earlier comparable runs, newest first, up to
    `baseline_runs + 1` of them: the one-night test uses the newest `baseline_runs`, the two-night
    test (tonight with the newest) the `baseline_runs` before the newest."""
    needed = max(config.min_baseline_runs, FEWEST_BASELINE_RUNS)
    tests, short = [], 0
    for identity, (value, labels) in sorted(current.items()):
        kind, probe, metric, _ = identity
        history = [run.get(identity) for run in baseline]
        recent = [h[0] for h in history[:config.baseline_runs] if h is not None]
        if len(recent) < needed:
            short += 1
            continue
        tests.append(night_test(kind, target, probe, metric, labels, [value], recent))
        previous = history[0][0] if history and history[0] is not None else None
        earlier = [h[0] for h in history[1:config.baseline_runs + 1] if h is not None]
        if previous is not None and len(earlier) >= needed:
            tests.append(night_test(kind, target, probe, metric, labels, [value, previous], earlier))
    return tests, short


# --- against the store ---------------------------------------------------------------------------

def baseline_window(store: Any, run: dict[str, Any], target: str, size: int,
                    entry: str | None = None) -> list[dict[str, Any]]:
    """The previous `size` runs of the run's suite in which `target` completed and that are
    comparable (reports/baseline.py) for suite entry `entry`, or for every entry when None; newest first."""
    selected = select_baselines(store, run, target, size)
    if entry is not None:
        return selected[entry].runs if entry in selected else []
    common = set.intersection(*({r["id"] for r in b.runs} for b in selected.values())) if selected else set()
    return [r for r in next(iter(selected.values())).runs if r["id"] in common] if selected else []


def baseline_resets(store: Any, run: dict[str, Any], config: DriftConfig) -> list[str]:
    """"baseline reset: <target> <entry>: <what changed>" for each entry whose earlier runs are
    none of them comparable: those entries are not drift-tested this time."""
    return [baseline.reset for target in completed_targets(run)
            for baseline in select_baselines(store, run, target, config.baseline_runs).values() if baseline.reset]


def drift_for_run(store: Any, run: dict[str, Any], config: DriftConfig) -> DriftOutcome:
    """Every drift test this run supports, decided together. Each suite entry of each completed
    target is tested against its own comparable runs; an entry or metric with fewer comparable
    baseline runs than the tests need is named instead of tested (a reset entry is named by
    `baseline_resets`)."""
    needed = max(config.min_baseline_runs, FEWEST_BASELINE_RUNS)
    outcome, tests = DriftOutcome(), []
    for target in completed_targets(run):
        for entry, baseline in select_baselines(store, run, target, config.baseline_runs + 1).items():
            if baseline.reset is not None:
                continue
            window = baseline.runs
            if min(len(window), config.baseline_runs) < needed:
                outcome.not_tested.append(f"drift: {target} {entry}: {len(window)} comparable baseline run(s), "
                                          f"the night-level tests need {needed}: not tested")
                continue
            found, short = target_tests(target, run_values(store.metrics(run["id"], target=target, entry=entry)),
                                        [run_values(store.metrics(r["id"], target=target, entry=entry))
                                         for r in window], config)
            tests += found
            if short:
                outcome.not_tested.append(f"drift: {target} {entry}: {short} metric(s) seen in fewer than {needed} "
                                          "comparable baseline runs: not tested")
    outcome.tests = decide(tests, config)
    return outcome
