"""Drift: did this run's metrics move away from the baseline window of earlier runs?

Baseline: per suite entry, the previous `baseline_runs` runs of the same suite in which the target
completed and the entry measured the same thing (reports/baseline.py); with none comparable the
entry is not tested and `baseline_resets` says what changed. Each kind of metric gets the test that fits how it was measured:

- proportion: a metric with n and a Wilson interval and a value in [0, 1] (error rate, hit rate,
  divergence rate, accuracy...). Counts are rebuilt as round(value * n); the baseline runs' counts
  are pooled and compared with the current run's by Fisher's exact test. Effect: the difference of
  the shares (absolute).
- latency: TTFT, end-to-end time and mean inter-token gap per request, read from the sample rows
  of the groups that reported ttft_p50_ms / e2e_p50_ms / itl_p50_ms, against the pooled baseline
  samples by a two-sided Mann-Whitney U test whose null is "shifted by less than the minimum
  effect" (stats.mann_whitney with a margin): latency moves a few percent from night to night on
  any shared host, and a point-null rank test on 200+ samples would call that drift. One value
  per request (the ITL gaps within a request are not independent). Effect: the relative change
  of the median.
- paired: schema_order's within-run McNemar result. Its p-value (does field order A beat B
  tonight?) is not a drift test: a difference that has always been there would alert every
  night. Drift asks whether the paired difference moved, so it compares the run's McNemar
  discordant counts (discordant_a_only, discordant_b_only over paired_difference's n) with the
  baseline's pooled counts (stats.paired_difference_change). Effect: the change of the paired
  difference.

The p-values of a run are adjusted together by Benjamini-Hochberg at `[drift] fdr`; a test fires
when its adjusted p-value is within the rate and its effect reaches the minimum effect for its
kind (or its metric name), so that a tiny shift on a large sample stays quiet. Other metrics
(counts, throughput, costs) have no per-sample distribution to test and are left to SLO rules.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from prober import stats
from prober.config import DriftConfig
from reports.baseline import completed_targets, select_baselines
from reports.slo import format_value, labels_key

# Defaults for `[drift] min_effect`: absolute share, relative median change, paired difference.
DEFAULT_MIN_EFFECT = {"proportion": 0.05, "latency": 0.20, "paired": 0.05}

# The sample quantity each latency metric family stands for.
LATENCY_FAMILIES = {"ttft_p50_ms": "ttft_ms", "e2e_p50_ms": "e2e_ms", "itl_p50_ms": "itl_ms"}


@dataclass(frozen=True)
class DriftTest:
    kind: str                      # "proportion" | "latency" | "paired"
    target: str
    probe: str
    metric: str
    labels: dict[str, Any]
    p_value: float | None
    effect: float | None           # signed; see the module docstring for its unit per kind
    baseline: float | None         # pooled share, pooled median, or pooled paired difference
    current: float | None
    n_current: int
    n_baseline: int
    baseline_runs: int
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
            moved = f"median {format_value(self.current)} ms vs {format_value(self.baseline)} ms ({change})"
        elif self.kind == "paired":
            moved = f"paired difference {format_value(self.current)} vs {format_value(self.baseline)}"
        else:
            moved = f"{format_value(self.current)} vs {format_value(self.baseline)}"
        q = "-" if self.q_value is None else f"{self.q_value:.2g}"
        return (f"drift: {self.target} {self.probe} {self.metric}{f' ({where})' if where else ''}: {moved} "
                f"over {self.baseline_runs} baseline runs (q={q})")


# --- the tests, as pure functions -----------------------------------------------------------------

def proportion_test(current_x: int, current_n: int, baseline_x: int, baseline_n: int
                    ) -> tuple[float | None, float | None]:
    """(Fisher's exact two-sided p, current share minus baseline share)."""
    if current_n <= 0 or baseline_n <= 0:
        return None, None
    p = stats.fisher_exact(baseline_x, baseline_n, current_x, current_n)
    return p, current_x / current_n - baseline_x / baseline_n


def latency_test(current: Sequence[float], baseline: Sequence[float], margin: float
                 ) -> tuple[float | None, float | None]:
    """(Mann-Whitney p of a shift beyond the margin, relative change of the median)."""
    p = stats.mann_whitney(baseline, current, margin)
    base_median, current_median = stats.median(baseline), stats.median(current)
    if p is None or not base_median or current_median is None:
        return None, None
    return p, current_median / base_median - 1.0


def paired_test(current: tuple[int, int, int], baseline: tuple[int, int, int]) -> tuple[float | None, float | None]:
    """(p of a change in the paired difference, its change); each argument is (a_only, b_only, n)."""
    (a, b, n), (base_a, base_b, base_n) = current, baseline
    p = stats.paired_difference_change(a, b, n, base_a, base_b, base_n)
    if p is None:
        return None, None
    return p, (a - b) / n - (base_a - base_b) / base_n


def min_effect_for(kind: str, metric: str, config: DriftConfig) -> float:
    return config.min_effect.get(metric, config.min_effect.get(kind, DEFAULT_MIN_EFFECT[kind]))


def decide(tests: Sequence[DriftTest], config: DriftConfig) -> list[DriftTest]:
    """Benjamini-Hochberg across the tests, then the minimum effect: each test with q and detected."""
    q_values = stats.benjamini_hochberg([t.p_value for t in tests])
    decided = []
    for test, q in zip(tests, q_values):
        floor = min_effect_for(test.kind, test.metric, config)
        detected = (q is not None and q <= config.fdr and test.effect is not None
                    and abs(test.effect) >= floor)
        decided.append(replace(test, q_value=q, min_effect=floor, detected=detected))
    return decided


# --- classifying metrics and gathering the baseline -------------------------------------------------

# Differences of two shares carry unit "ratio" and an interval too, but are not a share of n.
DIFFERENCE_METRICS = frozenset({"paired_difference", "penalty_effect"})


def is_proportion(row: dict[str, Any]) -> bool:
    """A share of n trials with its Wilson interval: value * n is a whole count."""
    value, n = row.get("value"), row.get("n")
    if (row.get("unit") != "ratio" or row.get("name") in DIFFERENCE_METRICS or not n or value is None
            or math.isnan(value) or not 0.0 <= value <= 1.0 or row.get("ci_low") is None):
        return False
    return abs(value * n - round(value * n)) < 1e-6 * n


def _identity(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["probe"], row["name"], labels_key(row.get("labels"))


def proportion_tests(current: Iterable[dict[str, Any]], baseline: Sequence[Sequence[dict[str, Any]]],
                     min_runs: int) -> list[DriftTest]:
    """One test per proportion metric of the current run that at least `min_runs` baseline runs have."""
    pooled: dict[tuple[str, str, str], list[tuple[int, int]]] = defaultdict(list)
    for run_rows in baseline:
        for row in run_rows:
            if is_proportion(row):
                pooled[_identity(row)].append((round(row["value"] * row["n"]), row["n"]))
    tests = []
    for row in current:
        counts = pooled.get(_identity(row), [])
        if not is_proportion(row) or len(counts) < min_runs:
            continue
        x, n = round(row["value"] * row["n"]), row["n"]
        base_x, base_n = sum(c[0] for c in counts), sum(c[1] for c in counts)
        p, effect = proportion_test(x, n, base_x, base_n)
        tests.append(DriftTest("proportion", row["target"], row["probe"], row["name"], row.get("labels") or {},
                               p, effect, base_x / base_n if base_n else None, row["value"], n, base_n,
                               len(counts)))
    return tests


def _discordant(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(a_only, b_only, items) per paired comparison (probe, labels) of one run."""
    found: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    for row in rows:
        if row["name"] in ("discordant_a_only", "discordant_b_only", "paired_difference"):
            found[(row["probe"], labels_key(row.get("labels")))][row["name"]] = row
    counts = {}
    for group, named in found.items():
        if len(named) == 3 and named["paired_difference"].get("n") and \
                all(named[k].get("value") is not None for k in ("discordant_a_only", "discordant_b_only")):
            counts[group] = (round(named["discordant_a_only"]["value"]), round(named["discordant_b_only"]["value"]),
                             int(named["paired_difference"]["n"]))
    return counts


def paired_tests(current: Sequence[dict[str, Any]], baseline: Sequence[Sequence[dict[str, Any]]],
                 min_runs: int) -> list[DriftTest]:
    """One test per paired comparison of the run that at least `min_runs` baseline runs have."""
    now = _discordant(current)
    before = [_discordant(rows) for rows in baseline]
    labels_of = {(r["probe"], labels_key(r.get("labels"))): (r["target"], r.get("labels") or {}) for r in current}
    tests = []
    for group, counts in sorted(now.items()):
        history = [run[group] for run in before if group in run]
        if len(history) < min_runs:
            continue
        pooled = (sum(h[0] for h in history), sum(h[1] for h in history), sum(h[2] for h in history))
        p, effect = paired_test(counts, pooled)
        target, labels = labels_of[group]
        tests.append(DriftTest("paired", target, group[0], "paired_difference", labels, p, effect,
                               (pooled[0] - pooled[1]) / pooled[2], (counts[0] - counts[1]) / counts[2],
                               counts[2], pooled[2], len(history)))
    return tests


def request_values(rows: Iterable[dict[str, Any]], quantity: str) -> list[float]:
    """One value per successful final request: ttft_ms, e2e_ms (end) or itl_ms (mean chunk gap)."""
    values = []
    for row in rows:
        if row.get("error_type") or not row.get("final", True):
            continue
        if quantity == "ttft_ms":
            value = row.get("ttft_ms")
        elif quantity == "e2e_ms":
            value = row.get("end_ms")
        else:
            offsets = row.get("chunk_offsets_ms") or []
            value = (offsets[-1] - offsets[0]) / (len(offsets) - 1) if len(offsets) > 1 else None
        if value is not None:
            values.append(float(value))
    return values


def measured_rows(samples: Iterable[dict[str, Any]], labels: dict[str, Any]) -> list[dict[str, Any]]:
    """The measured samples of one metric group: labels (less `phase`) equal the metric's labels."""
    wanted = labels_key(labels)
    return [s for s in samples
            if (s.get("labels") or {}).get("phase", "measure") == "measure"
            and labels_key({k: v for k, v in (s.get("labels") or {}).items() if k != "phase"}) == wanted]


def latency_test_for(target: str, probe: str, quantity: str, labels: dict[str, Any],
                     current: Sequence[float], baseline_by_run: Sequence[Sequence[float]],
                     config: DriftConfig) -> DriftTest:
    pooled = [v for run in baseline_by_run for v in run]
    p, effect = latency_test(current, pooled, min_effect_for("latency", quantity, config))
    return DriftTest("latency", target, probe, quantity, labels, p, effect, stats.median(pooled),
                     stats.median(current), len(current), len(pooled), len(baseline_by_run))


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


def drift_for_run(store: Any, run: dict[str, Any], config: DriftConfig) -> list[DriftTest]:
    """Every drift test this run supports (no comparable baseline, no test), decided together.
    Each suite entry of each completed target is tested against its own comparable runs."""
    tests: list[DriftTest] = []
    for target in completed_targets(run):
        for entry, baseline in select_baselines(store, run, target, config.baseline_runs).items():
            window = baseline.runs
            if len(window) < config.min_baseline_runs:
                continue
            current = store.metrics(run["id"], target=target, entry=entry)
            before = [store.metrics(r["id"], target=target, entry=entry) for r in window]
            tests += proportion_tests(current, before, config.min_baseline_runs)
            tests += paired_tests(current, before, config.min_baseline_runs)
            tests += _latency_tests(store, run, window, target, entry, current, config)
    return decide(tests, config)


def _latency_tests(store: Any, run: dict[str, Any], window: Sequence[dict[str, Any]], target: str, entry: str,
                   current: Sequence[dict[str, Any]], config: DriftConfig) -> list[DriftTest]:
    groups = {(row["probe"], LATENCY_FAMILIES[row["name"]], labels_key(row.get("labels"))): row.get("labels") or {}
              for row in current if row["name"] in LATENCY_FAMILIES and row.get("value") is not None}
    probes = {probe for probe, _, _ in groups}
    now = {probe: store.samples(run["id"], probe=probe, target=target, entry=entry) for probe in probes}
    before = [{probe: store.samples(r["id"], probe=probe, target=target, entry=entry) for probe in probes}
              for r in window]
    tests = []
    for (probe, quantity, _), labels in sorted(groups.items(), key=lambda item: item[0]):
        values = request_values(measured_rows(now[probe], labels), quantity)
        history = [request_values(measured_rows(run_samples[probe], labels), quantity) for run_samples in before]
        history = [h for h in history if h]
        if values and len(history) >= config.min_baseline_runs:
            tests.append(latency_test_for(target, probe, quantity, labels, values, history, config))
    return tests
