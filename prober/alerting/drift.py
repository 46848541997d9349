"""Drift: did this run's metrics move away from the spread of earlier comparable runs?

The night (run) is the unit. A real endpoint varies from night to night (load, routing, cache
state, model revisions); pooling the requests of all baseline runs into one sample reads that
variation as drift (issue 12). So each metric family contributes one value per run, and tonight's
value is judged against the values of the baseline runs, whose spread includes the night-to-night
variation. Baseline: per suite entry, the previous `baseline_runs` runs of the same suite in which
the target completed and the entry measured the same thing (prober/alerting/baseline.py); with none
comparable the entry is not tested and `baseline_resets` says what changed.

The page budget (`[drift] false_pages_per_90_nights`, one per target by default) decides the
policy, measured by bench/alarm_calibration.py (docs/operations.md, "Alerting"):

- Families, not cells. Hundreds of metric cells per target would split the budget too thin to see
  a real move, so the cells of one quantity are pooled into one run-level value first: the counts
  of a share over the labels its probe pools (`pooled_labels`: prompts of a divergence level, the
  grid cells of one penalty setting, the positions of a cache case; error rate and goodput over
  every label), and the mean log p50 of a latency quantity over its concurrency levels. The
  alert's text names the cell that moved most.
- Regressions page, improvements notify. Each family has a bad direction (its probe's
  `metric_families`); its test is one-sided in that direction. A family without one (modal share,
  paired differences...) and a move in the good direction are reported as notices, never paged.
- Tests, each with its exact or t-based level: a share is tonight's count against the
  beta-binomial predictive of the baseline runs (stats.share_night_p: exact tails, the
  overdispersion the baseline shows); a latency family is the Student-t prediction interval of the
  baseline's values (stats.night_prediction_p) on the log scale; schema_order's paired difference
  likewise, its spread floored at tonight's paired sampling variance.
- Nights are not independent: a deploy or a noisy neighbour lasts days. Every test estimates the
  lag-1 autocorrelation its baseline's nights show and judges its window against the baseline's
  AR(1) one-step prediction: a latency or paired family against the baseline mean plus the part
  of the newest baseline night's departure that lasts into the window, on the innovations'
  variance (stats.serial_prediction); a share's predictive mean carries that night's night effect
  likewise, its variance the plain window's with the night effects' covariances
  (stats.share_night_p, ar1_window_variance).
- Windows: tonight against the previous `baseline_runs` runs (a notice only), the mean of tonight
  and the previous run against the runs before that one, which pages when each of its two nights
  also lies beyond the baseline's 90th percentile on its own (a regression that persists, not one
  wild night), and the slope of the family over the last `baseline_runs` runs (a creep too slow
  for two nights to show), which pages once the latest two nights are also out of the baseline's
  range (TREND_RECENT_P). See WINDOW_BUDGET.
- Families that move together page together: the latency families of one probe and label set
  are one alert (page_group), which names every family of it that moved, and share one family's
  part of the budget over the effective number of tests they make (group_effective_tests).
- The budget is split (weighted Bonferroni) over the windows that page and evenly over the night's
  regression families of a target within each: each fires at p <= its share of
  false_pages_per_90_nights / 90, when its effect also reaches the minimum effect for its kind (or
  metric name). A flagged row is left out; metrics without a per-run distribution (counts,
  throughput, costs) are left to SLO rules.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from prober.alerting.baseline import BaselineReads, read_candidates, select_baselines
from prober.alerting.run_values import EntryValues, Identity, RunValue, values_of_runs
from prober.alerting.slo import format_value
from prober.core import stats
from prober.core.collector import collector_paused
from prober.core.config import DriftConfig
from prober.core.probe_registry import metric_family
from prober.core.records import completed_targets, label_text, labels_key

if TYPE_CHECKING:
    from prober.store import Store

# Defaults for `[drift] min_effect`: absolute share, relative median change, paired difference.
DEFAULT_MIN_EFFECT = {"proportion": 0.05, "latency": 0.20, "paired": 0.05}

# The tests need a spread: a prediction interval on fewer than 3 baseline runs has 1 degree of freedom.
FEWEST_BASELINE_RUNS = 3


def bad_direction(probe: str, metric: str) -> int:
    """+1: a rise of the family is a regression; -1: a fall is; 0: it pages nothing, its moves are
    notices. Declared by its probe (`metric_families`, prober/core/declarations.py), as are the latency
    families and the pooled labels. Every page-eligible family splits the budget, so a mirror of one
    that pages (modal_share of divergence_rate) has none: it would only cost power."""
    family = metric_family(probe, metric)
    return family.bad_direction if family is not None else 0


@dataclass(frozen=True)
class DriftTest:
    kind: str                      # "proportion" | "latency" | "paired"
    target: str
    probe: str
    metric: str
    labels: dict[str, Any]         # the family's labels (pooled labels left out)
    p_value: float | None          # one-sided towards the bad direction; two-sided without one
    effect: float | None           # signed; see the module docstring for its unit per kind
    baseline: float | None         # pooled share, geometric mean (ms), or mean paired difference
    current: float | None          # the same over the tested nights
    n_current: int
    n_baseline: int
    baseline_runs: int
    nights: int = 1                # 1: tonight alone; 2: tonight and the previous run together;
                                   # a trend: the runs its slope was fitted on
    direction: int = 0             # the bad direction (+1 up, -1 down), 0: notices only
    cells: int = 1                 # metric cells pooled into the family
    worst_cell: str = ""           # the cell that moved most towards the bad direction
    min_effect: float = 0.0
    alpha: float | None = None     # the level this test was decided at
    detected: bool = False         # significant and at least the minimum effect, either way
    # when the window's oldest night started, if not tonight's (where an open drift begins); not
    # part of what the test found
    window_start: Any = field(default=None, compare=False)
    # Latency: the baseline's night-to-night variance (log scale), and after `decide` the smallest
    # relative shift its two-night test pages within two nights nine times in ten (issue 30).
    night_variance: float | None = field(default=None, compare=False)
    detectable: float | None = field(default=None, compare=False)
    # the lag-1 autocorrelation of the baseline's nights the test allowed for (latency)
    autocorrelation: float = field(default=0.0, compare=False)
    # A family of a page group (page_group): the effective number of independent tests its
    # families make (group_effective_tests); 1: a family that pages alone
    group_tests: float = field(default=1.0, compare=False)
    # A window of several nights: the largest of its nights' own one-sided p against the window's
    # baseline (None: not computed, the window's own p was far from any level). A trend: the
    # one-sided p of its family's two-night window (None: no such window tonight)
    each_night_p: float | None = field(default=None, compare=False)
    # A slow creep: the slope over the last `nights` runs (stats.trend_p); baseline and current
    # are the fitted line's values at the window's oldest and newest night
    trend: bool = False

    @property
    def regressed(self) -> bool:
        """A detected move in the family's bad direction."""
        return self.detected and self.direction != 0 and (self.effect or 0) * self.direction > 0

    @property
    def persists(self) -> bool:
        """A window that pages (WINDOW_BUDGET), each of its nights beyond the baseline's
        (1 - EACH_NIGHT_P) quantile towards the bad direction on its own; a trend, with its
        family's latest two nights out of the baseline's range (TREND_RECENT_P)."""
        if self.trend:
            return self.each_night_p is not None and self.each_night_p <= TREND_RECENT_P
        return self.nights == 2 and self.each_night_p is not None and self.each_night_p <= EACH_NIGHT_P

    @property
    def pages(self) -> bool:
        """A regression that persists. Tonight alone is a notice."""
        return self.regressed and self.persists

    @property
    def key(self) -> str:
        return family_key(self.target, self.probe, self.metric, labels_key(self.labels))

    @property
    def summary(self) -> str:
        where = label_text(self.labels)
        pooled = f"{self.cells} cells pooled" if self.cells > 1 else ""
        where = "; ".join(part for part in (where, pooled) if part)
        if self.kind == "latency":
            change = f"{self.effect:+.0%}" if self.effect is not None else "?"
            mean = "mean " if self.cells > 1 else ""
            moved = f"{mean}p50 {format_value(self.current)} ms vs {format_value(self.baseline)} ms ({change})"
        elif self.kind == "paired":
            moved = f"paired difference {format_value(self.current)} vs {format_value(self.baseline)}"
        else:
            moved = f"{format_value(self.current)} vs {format_value(self.baseline)}"
        when = ("tonight" if self.nights == 1 else f"trend over the last {self.nights} runs" if self.trend
                else f"last {self.nights} runs")
        p = "-" if self.p_value is None else f"{self.p_value:.2g}"
        worst = f"; most moved: {self.worst_cell}" if self.worst_cell else ""
        against = "" if self.trend else f" against {self.baseline_runs} baseline runs"
        return (f"drift: {self.target} {self.probe} {self.metric}{f' ({where})' if where else ''}: {moved} "
                f"({when}){against} (p={p}){worst}")


@dataclass
class DriftOutcome:
    """A run's decided tests, and one line per target or metric group that could not be tested."""

    tests: list[DriftTest] = field(default_factory=list)
    not_tested: list[str] = field(default_factory=list)

    @property
    def notices(self) -> list[str]:
        """Detected moves that do not page: improvements, and families with no bad direction."""
        return [f"notice: {t.summary}" for t in self.tests if t.detected and not t.pages]


def min_effect_for(kind: str, metric: str, config: DriftConfig) -> float:
    return config.min_effect.get(metric, config.min_effect.get(kind, DEFAULT_MIN_EFFECT[kind]))


# The share of the nightly page budget each window spends: all of it on the two-night window,
# where a sustained move is judged on its second night (the mean of two nights has half the
# night-to-night variance). Heavy-tailed nights (a night effect drawn from Student-t with 4 df,
# say) put far more than a normal tail's share beyond the strict levels the budget gives, so one
# wild night paged through a one-night window, even one that paged only moves of three minimum
# effects, and through the two-night window it formed with a quiet night (bench/alarm_calibration.py,
# "low t4": 3.0 false pages per 90 nights). So a regression must persist to page: tonight alone is
# a notice, decided at the two-night window's level, and the two-night window pages only when each
# of its nights on its own lies beyond the baseline's (1 - EACH_NIGHT_P) quantile towards the bad
# direction. A regression of the sizes the detection targets name passes that with room to spare.
# A collapse pages on its second night; the SLO rules page an outright failure the night it happens.
# A creep too slow for two nights to show (+0.5% a night) is the trend window's: the slope of the
# family over the last `baseline_runs` runs (TREND_WINDOW), with a fifth of the budget.
WINDOW_BUDGET = {"two nights": 0.8, "trend": 0.2}
EACH_NIGHT_P = 0.1
# A slope fitted on 56 autocorrelated nights reads a wander as a creep: at AR(1) rho 0.8 the trend
# window alone paged 1 to 2 times per 90 nights, and the alert it opened resolved the next night
# (its latest nights were within range) and paged again the night after, five pages for one
# wander (bench/alarm_calibration.py, "low rho 0.8": 71 false pages in 1,800 nights, seed 3). So a
# trend pages only when the family's latest two nights are also out of the baseline's range, the
# range whose return resolves the alert (IN_RANGE_P): a creep is paged once it has moved the level.
TREND_RECENT_P = 0.05
# A trend is fitted on at least this many runs (fewer: a step tonight has too much leverage).
FEWEST_TREND_RUNS = 28


def _paging_window(test: DriftTest) -> str:
    """The window whose level a test is decided at (WINDOW_BUDGET): tonight alone, which pages
    nothing, at the two-night window's."""
    return "trend" if test.trend else "two nights"


def decide(tests: Sequence[DriftTest], config: DriftConfig) -> list[DriftTest]:
    """Split each target's nightly page budget over its regression families (weighted Bonferroni):
    WINDOW_BUDGET per window (a window with no tests leaves its share to the others), evenly over
    the probes tested in it, evenly over each probe's families, so that a probe with a wide grid
    (penalty: a family per setting) does not take the power of the others. Then the minimum effect.
    Notice-only tests are held to the same level, spent on nobody's pager."""
    per_night = config.false_pages_per_90_nights / 90
    # A page group is one page: its families share one family's part of the budget, divided by the
    # effective number of tests they make (their nights move together, so a Bonferroni over them
    # would spend a fraction of it).
    families: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for test in tests:
        if test.direction != 0:
            families[(test.target, _paging_window(test), test.probe)].add(page_group(test))
    probes: dict[tuple[str, str], int] = defaultdict(int)
    for target, window_name, _ in families:
        probes[(target, window_name)] += 1
    decided = []
    for test in tests:
        name = _paging_window(test)
        windows = {n: share for n, share in WINDOW_BUDGET.items() if probes[(test.target, n)]}
        window = windows.get(name, 0.0) / sum(windows.values()) if windows else 1.0
        alpha = (per_night * window / max(1, probes[(test.target, name)])
                 / max(1, len(families[(test.target, name, test.probe)])) / max(1.0, test.group_tests))
        floor = min_effect_for(test.kind, test.metric, config)
        # A directional test's p is one-sided towards the bad direction; 1 - p stands for the other
        # tail, so that a large improvement still shows as a notice.
        significant = test.p_value is not None and (
            test.p_value <= alpha or (test.direction != 0 and 1 - test.p_value <= alpha))
        detected = significant and test.effect is not None and abs(test.effect) >= floor - 1e-12
        decided.append(replace(test, alpha=alpha, min_effect=floor, detected=detected,
                               detectable=_detectable(test, alpha, floor)))
    return decided


# What "detectable" promises: paged within two nights in this share of histories.
DETECTION_POWER = 0.9


def _detectable(test: DriftTest, alpha: float, floor: float) -> float | None:
    """A latency family's two-night test: the smallest relative shift it pages with
    DETECTION_POWER (never below the minimum effect); None for other tests."""
    if (test.kind != "latency" or test.nights != 2 or test.trend or test.night_variance is None
            or test.direction == 0):
        return None
    shift = stats.shift_detectable(test.night_variance, test.baseline_runs, alpha, DETECTION_POWER,
                                   test.autocorrelation, EACH_NIGHT_P)
    if shift is None:
        return None
    return max(math.exp(shift) - 1 if test.direction > 0 else 1 - math.exp(-shift), floor)


# --- the night-level test of one family -----------------------------------------------------------

def _alternative(direction: int) -> str:
    return {1: "greater", -1: "less"}.get(direction, "two-sided")


def _worst_cell(kind: str, current: Sequence[RunValue], baseline: Sequence[RunValue], direction: int) -> str:
    """The pooled cell whose value moved most (towards the bad direction when there is one)."""
    if len(current[0].cells) < 2:
        return ""
    before: dict[str, list[float]] = defaultdict(list)
    for run in baseline:
        for key, value in run.cells:
            before[key].append(value)
    moves = []
    for key, value in current[0].cells:
        if before.get(key):
            change = value - sum(before[key]) / len(before[key])
            moves.append((change * direction if direction else abs(change), key, value, change))
    if not moves:
        return ""
    _, key, value, change = max(moves)
    where = label_text(json.loads(key))
    if kind == "latency":
        return f"{where} p50 {format_value(math.exp(value))} ms ({math.exp(change) - 1:+.0%})"
    return f"{where} {format_value(value)} ({change:+.3g})"


def night_test(kind: str, target: str, probe: str, metric: str, labels: dict[str, Any],
               current: Sequence[RunValue], baseline: Sequence[RunValue], describe_below: float = 1.0,
               p_values: bool = True, gap: int = 0) -> DriftTest:
    """The mean of `current` (tonight, or tonight and the previous run) against `baseline`, one-sided
    towards the family's bad direction. The cell that moved most is named when p <= `describe_below`
    (naming it costs more than the test, and only a detected test's text shows it). Without
    `p_values` the test has none (see drift_for_run). `gap`: runs between the newest baseline run and
    the oldest of `current` (left out of the baseline), which the prediction carries over."""
    test = _night_test(kind, target, probe, metric, labels, current, baseline, p_values, gap)
    if test.p_value is None or test.p_value > describe_below:
        return test
    return replace(test, worst_cell=_worst_cell(kind, current, baseline, test.direction))


def _night_test(kind: str, target: str, probe: str, metric: str, labels: dict[str, Any],
                current: Sequence[RunValue], baseline: Sequence[RunValue], p_values: bool = True,
                gap: int = 0) -> DriftTest:
    m, k = len(current), len(baseline)
    direction = bad_direction(probe, metric)
    cells = max(1, len(current[0].cells))
    if kind == "proportion":
        x, n = sum(v.successes for v in current), sum(v.n for v in current)
        base_x, base_n = [v.successes for v in baseline], [v.n for v in baseline]
        p = (stats.share_night_p(x, n, base_x, base_n, _alternative(direction), nights=m, serial=True, gap=gap)
             if p_values else None)
        now, before = x / n, sum(base_x) / sum(base_n)
        return DriftTest(kind, target, probe, metric, labels, p, now - before, before, now, n, sum(base_n), k, m,
                         direction=direction, cells=cells)
    floor = (stats.LATENCY_LOG_VARIANCE_FLOOR if kind == "latency"
             else max(v.sampling_variance for v in current))
    values = [v.value for v in baseline]
    p = (stats.night_prediction_p([v.value for v in current], values, floor, _alternative(direction), serial=True,
                                  gap=gap)[0]
         if p_values else None)
    now, before = sum(v.value for v in current) / m, sum(values) / k
    n_now, n_before = sum(v.n for v in current), sum(v.n for v in baseline)
    if kind == "latency":
        _, spread, rho, _ = stats.serial_baseline(values) if k > 2 else (None, None, 0.0, None)
        return DriftTest(kind, target, probe, metric, labels, p, math.exp(now - before) - 1, math.exp(before),
                         math.exp(now), n_now, n_before, k, m, direction=direction, cells=cells,
                         night_variance=None if spread is None else max(spread, floor), autocorrelation=rho)
    return DriftTest(kind, target, probe, metric, labels, p, now - before, before, now, n_now, n_before, k, m,
                     direction=direction, cells=cells)


def trend_test(kind: str, target: str, probe: str, metric: str, labels: dict[str, Any],
               series: Sequence[RunValue]) -> DriftTest | None:
    """The family's slope over `series` (newest first, at least FEWEST_TREND_RUNS runs), one-sided
    towards its bad direction (None without one): a latency family's mean log p50, a share's
    night shares. Its effect is the fitted line's change over the window (relative for latency)."""
    direction = bad_direction(probe, metric)
    if direction == 0 or len(series) < FEWEST_TREND_RUNS:
        return None
    oldest_first = series[::-1]
    if kind == "latency":
        values, floor = [v.value for v in oldest_first], stats.LATENCY_LOG_VARIANCE_FLOOR
    else:
        values = [v.successes / v.n for v in oldest_first if v.n > 0]
        trials = sum(v.n for v in oldest_first)
        pooled = sum(v.successes for v in oldest_first) / trials if trials else 0.0
        # the binomial variance of a night's share: the least the nights can vary
        floor = pooled * (1 - pooled) / (trials / len(values)) if values else 0.0
    found = stats.trend_p(values, _alternative(direction), floor)
    if found is None:
        return None
    n_now, n_window = series[0].n, sum(v.n for v in series)
    if kind == "latency":
        return DriftTest(kind, target, probe, metric, labels, found.p_value,
                         math.exp(found.fitted_last - found.fitted_first) - 1, math.exp(found.fitted_first),
                         math.exp(found.fitted_last), n_now, n_window, len(values), len(values), direction=direction,
                         cells=max(1, len(series[0].cells)), trend=True, autocorrelation=found.rho)
    return DriftTest(kind, target, probe, metric, labels, found.p_value, found.fitted_last - found.fitted_first,
                     found.fitted_first, found.fitted_last, n_now, n_window, len(values), len(values),
                     direction=direction, cells=max(1, len(series[0].cells)), trend=True)


@dataclass(frozen=True)
class BaselineLimits:
    """Which earlier runs a family's baseline may take besides comparability, by the time each run
    started (any ordered value: a datetime in the store, a night's number in the benchmark).

    `drifting`: per family key (DriftTest.key), the start of its open drift alert: that run and
    later ones stay out of the family's baseline, so that a regression that persists is judged
    against the level before it and never becomes its own baseline (issue 30). `accepted`: per
    family metric name (None: every metric of the target), the time from which the user accepted
    the level as normal (`prober baseline accept`, or prober's "new normal" notice): earlier runs
    stay out. A family left with fewer runs than the tests need is not tested until it has them."""

    drifting: Mapping[str, Any] = field(default_factory=dict)
    accepted: Mapping[str | None, Any] = field(default_factory=dict)

    def accepted_since(self, key: str, metric: str) -> Any:
        """The newest accepted start for the family: by its key, its metric name or every metric."""
        found = [since for name, since in self.accepted.items() if name in (None, metric, key) and since is not None]
        return max(found) if found else None

    def allowed(self, key: str, metric: str, started: Sequence[Any]) -> list[bool] | None:
        """Per baseline run (newest first), may the family take it; None when nothing limits it."""
        drifting, accepted = self.drifting.get(key), self.accepted_since(key, metric)
        if drifting is None and accepted is None:
            return None
        return [(drifting is None or when < drifting) and (accepted is None or when >= accepted) for when in started]


def family_key(target: str, probe: str, metric: str, labels_key_text: str) -> str:
    """The identity of a family's drift (DriftTest.key), from its labels' key: its alert's, unless
    the family pages in a group (page_group)."""
    return f"drift|{target}|{probe}|{metric}|{labels_key_text}"


# Families that move together page as one alert (issue 30). The latency families of one probe and
# label set (ttft, itl and e2e; a sweep's capacity) share the night's load: a slow night moved all
# three and paged three times, so under autocorrelated nights the false pages came in threes
# (bench/alarm_calibration.py). They page as one alert named LATENCY_GROUP, whose text names every
# family of it that moved; each family is still tested, and kept out of its baseline, on its own.
LATENCY_GROUP = "latency"


def page_group(test: DriftTest) -> str:
    """The identity a family's drift pages under: the latency group of its probe and labels for a
    latency family, else the family's own key."""
    if test.kind == "latency":
        return family_key(test.target, test.probe, LATENCY_GROUP, labels_key(test.labels))
    return test.key


def group_effective_tests(series: Sequence[Sequence[float]]) -> float:
    """The effective number of independent tests that tests of these families make, from their
    values over the same baseline nights (one sequence per family): Nyholt's 1 + (M - 1)(1 -
    Var(lambda) / M), lambda the eigenvalues of their correlation matrix. M for uncorrelated
    families, 1 for families that move as one; M when the nights are too few (fewer than
    FEWEST_BASELINE_RUNS) or a family does not vary."""
    m = len(series)
    if m < 2:
        return 1.0
    import numpy as np

    values = np.asarray(series, dtype=np.float64)
    if values.shape[1] < FEWEST_BASELINE_RUNS or np.any(values.std(axis=1) <= 0):
        return float(m)
    eigenvalues = np.linalg.eigvalsh(np.corrcoef(values))
    return float(min(m, max(1.0, 1 + (m - 1) * (1 - np.var(eigenvalues, ddof=1) / m))))


def _with_group_tests(tests: list[DriftTest], history: Mapping[tuple[str, str], Sequence[RunValue | None]],
                      runs: int) -> list[DriftTest]:
    """Each grouped family's test with its group's effective number of tests, from the values its
    families have in common over the two-night window's baseline, the baseline runs after the
    newest up to `runs` (`history`: per (page group, family key), newest first, None where the run
    did not measure it). The newest is left out: a regression's first night, one family moved
    and the others not, would read as families that do not move together on its second."""
    members: dict[str, dict[str, Sequence[RunValue | None]]] = defaultdict(dict)
    for (group, key), values in history.items():
        members[group][key] = values
    effective = {}
    for group, found in members.items():
        if len(found) < 2:
            continue
        columns = [i for i in range(1, runs) if all(i < len(v) and v[i] is not None for v in found.values())]
        effective[group] = group_effective_tests(
            [[v[i].value for i in columns] for v in found.values()])  # type: ignore[union-attr]
    return [replace(t, group_tests=effective[page_group(t)]) if page_group(t) in effective else t for t in tests]


def target_tests(target: str, current: dict[Identity, tuple[RunValue, dict[str, Any]]],
                 baseline: Sequence[dict[Identity, tuple[RunValue, dict[str, Any]]]],
                 config: DriftConfig, limits: BaselineLimits | None = None,
                 started: Sequence[Any] = (), p_values: bool = True) -> tuple[list[DriftTest], int]:
    """Tonight's tests of one target (undecided) and how many families had too few baseline runs.

    Arguments are `run_values` of tonight and of the earlier comparable runs, newest first, up to
    `baseline_runs + 1` of them: the one-night test uses the newest `baseline_runs`, the two-night
    test (tonight with the newest) the `baseline_runs` before the newest. A run whose family pooled
    other cells than tonight's (a level flagged, say) does not count for that family. `limits`
    and `started` (when each baseline run started): the runs a family's open drift or an accepted
    level leave out of its baseline (then more runs than `baseline_runs + 1` may be passed).
    `p_values`: as drift_for_run's."""
    needed = max(config.min_baseline_runs, FEWEST_BASELINE_RUNS)
    budget = config.false_pages_per_90_nights / 90      # no test is decided at a laxer level
    tests, short = [], 0
    grouped: dict[tuple[str, str], Sequence[RunValue | None]] = {}
    for identity, (value, labels) in sorted(current.items()):
        kind, probe, metric, _ = identity
        found_before = [run.get(identity) for run in baseline]
        history = [h[0] if h is not None and h[0].cell_keys == value.cell_keys else None for h in found_before]
        key = family_key(target, probe, metric, identity[3])
        allowed = limits.allowed(key, metric, started) if limits else None
        if allowed is not None:
            # The previous run may still join tonight in the two-night window (an open drift is
            # judged on its latest nights); only an accepted level's start bounds it.
            since = limits.accepted_since(key, metric) if limits else None
            previous_allowed = bool(started) and (since is None or started[0] >= since)
            usable = [ok and h is not None for h, ok in zip(history, allowed)]
            kept = [h for h, ok in zip(history, usable) if ok and h is not None]
            recent = kept[:config.baseline_runs]
            previous = history[0] if history and previous_allowed else None
            earlier = [h for h, ok in zip(history[1:], usable[1:]) if ok and h is not None][:config.baseline_runs]
        else:
            usable = [h is not None for h in history]
            recent = [h for h in history[:config.baseline_runs] if h is not None]
            previous = history[0] if history else None
            earlier = [h for h in history[1:config.baseline_runs + 1] if h is not None]
        # runs between tonight (or the previous run) and its baseline's newest, left out of it (an
        # open drift's nights): the one-step prediction carries the baseline's level over them
        gap = usable.index(True) if True in usable else 0
        earlier_gap = usable[1:].index(True) if True in usable[1:] else 0
        if len(recent) < needed:
            short += 1
            continue
        tests.append(night_test(kind, target, probe, metric, labels, [value], recent, budget, p_values, gap))
        if page_group(tests[-1]) != key:
            grouped[(page_group(tests[-1]), key)] = history
        latest: float | None = None          # the two-night window's p (what a trend's page needs)
        if previous is not None and len(earlier) >= needed:
            two = night_test(kind, target, probe, metric, labels, [value, previous], earlier, budget, p_values,
                             earlier_gap)
            if two.p_value is not None and two.p_value <= budget:
                # only a window near a level needs its nights judged one by one (tonight a run
                # further from the baseline than the previous)
                each = [_night_test(kind, target, probe, metric, labels, [night], earlier,
                                    gap=earlier_gap + extra).p_value
                        for night, extra in ((value, 1), (previous, 0))]
                two = replace(two, each_night_p=None if None in each else max(p for p in each if p is not None))
            tests.append(replace(two, window_start=started[0]) if started else two)
            latest = two.p_value
        if allowed is None and kind in ("latency", "proportion"):
            series = [value, *(h for h in history[:config.baseline_runs - 1] if h is not None)]
            trend = trend_test(kind, target, probe, metric, labels, series)
            if trend is not None:
                trend = replace(trend, p_value=trend.p_value if p_values else None, each_night_p=latest)
                tests.append(replace(trend, window_start=started[0]) if started else trend)
    return _with_group_tests(tests, grouped, config.baseline_runs + 1), short


# An open drift alert resolves when every test of its family has its one-sided p above this: the
# metric is back within the baseline's range, not merely short of significance at the page level.
IN_RANGE_P = 0.05


def limits_from_alerts(alert_rows: Iterable[dict[str, Any]], site: str = "",
                       accepted: Mapping[str | None, Any] | None = None) -> BaselineLimits:
    """BaselineLimits from the drift alert rows of one target and site (as `judge` leaves them):
    a firing one holds its family's regressed nights out of the baseline; one closed by a "new
    normal" notice re-baselines the family on the nights since its drift began. `accepted`: the
    user's accepts (metric or None -> since), which the newer of the two wins against."""
    drifting: dict[str, Any] = {}
    held: dict[str | None, Any] = dict(accepted or {})
    suffix = f"|site={site}" if site else ""
    for row in alert_rows:
        key, detail = row["key"], row.get("detail") or {}
        if row.get("kind") != "drift" or (suffix and not key.endswith(suffix)):
            continue
        family = key[:len(key) - len(suffix)] if suffix else key
        # a group's alert (page_group) holds or re-baselines each of its families
        members = list((detail.get("members") or {}).values()) or [family]
        if row.get("state") == "firing" and detail.get("drift_since") is not None:
            drifting.update(dict.fromkeys(members, detail["drift_since"]))
        elif detail.get("new_normal_since") is not None:
            held.update(dict.fromkeys(members, detail["new_normal_since"]))
    return BaselineLimits(drifting, held)


# --- against the store ---------------------------------------------------------------------------

def baseline_resets(store: Store, run: dict[str, Any], config: DriftConfig,
                    reads: BaselineReads | None = None) -> list[str]:
    """"baseline reset: <target> <entry>: <what changed>" for each entry whose earlier runs are
    none of them comparable: those entries are not drift-tested this time. `reads`: those of the
    run's drift tests (drift_for_run), not read again."""
    return [baseline.reset for target in completed_targets(run)
            for baseline in select_baselines(store, run, target, config.baseline_runs, reads).values()
            if baseline.reset]


def stored_limits(store: Store, run: dict[str, Any]) -> dict[str, BaselineLimits]:
    """Per completed target of `run` that has any: the BaselineLimits its drift alert rows and
    the baseline accepts in force (`prober baseline accept`) set, for the run's site."""
    site = run.get("site") or ""
    targets = set(completed_targets(run))
    rows = [row for row in store.alerts() if row.get("kind") == "drift" and row.get("target") in targets]
    accepted: dict[str, dict[str | None, Any]] = defaultdict(dict)
    for accept in store.baseline_accepts(site=site):
        if accept["target"] in targets:
            held = accepted[accept["target"]]
            held[accept["metric"]] = max(held.get(accept["metric"]) or accept["since"], accept["since"])
    found = {}
    for target in targets:
        limits = limits_from_alerts([row for row in rows if row["target"] == target], site, accepted.get(target))
        limits = BaselineLimits({key: _time(since) for key, since in limits.drifting.items()},
                                {key: _time(since) for key, since in limits.accepted.items()})
        if limits.drifting or limits.accepted:
            found[target] = limits
    return found


def _time(value: Any) -> Any:
    """A time kept in an alert's detail (ISO text) as the store's run times are (aware datetimes)."""
    return dt.datetime.fromisoformat(value) if isinstance(value, str) else value


def drift_for_run(store: Store, run: dict[str, Any], config: DriftConfig,
                  reads: BaselineReads | None = None, *, p_values: bool = True,
                  keep_values: bool = False) -> DriftOutcome:
    """Every drift test this run supports, decided together. Each suite entry of each completed
    target is tested against its own comparable runs; an entry or metric with fewer comparable
    baseline runs than the tests need is named instead of tested (a reset entry is named by
    `baseline_resets`, which `reads` lets select the same baselines without reading them again).

    Without `p_values` no test gets a p-value (none is detected): each still gets its level, its
    minimum effect and its stated power (DriftTest.detectable), which depend on which families are
    tested, not on their p-values. That is all `prober show` and `prober drift-power` print, and
    the p-values of a fleet's 4,000 tests (most of them shares) were a fifth of `show`'s time.

    Each run's values are read where the store keeps them and derived from its metric rows where
    not (prober/alerting/run_values.py); `keep_values` keeps those derived for the finished runs
    (the post-run evaluation does, so that the next night and `show` read them)."""
    with collector_paused():     # 150,000 baseline rows for a fleet's year: collections would free nothing
        return _drift_for_run(store, run, config, reads, p_values, keep_values)


def _drift_for_run(store: Store, run: dict[str, Any], config: DriftConfig, reads: BaselineReads | None,
                   p_values: bool = True, keep_values: bool = False) -> DriftOutcome:
    needed = max(config.min_baseline_runs, FEWEST_BASELINE_RUNS)
    outcome, tests = DriftOutcome(), []
    reads = BaselineReads() if reads is None else reads
    limits = stored_limits(store, run)
    # An open drift or an accepted level leaves runs out of a family's baseline: read that many more.
    depth = config.baseline_runs + 1 + (config.new_normal_nights if limits else 0)
    read_candidates(store, run, completed_targets(run), depth, reads)    # the fleet's at once
    for target in completed_targets(run):
        baselines = select_baselines(store, run, target, depth, reads)
        # One query per target for the stored metrics of this run and every run of its baselines,
        # only the rows a test can judge: shares, latency families, paired comparisons.
        wanted = {run["id"], *(r["id"] for b in baselines.values() if b.reset is None for r in b.runs)}
        probes = {baseline.probe for baseline in baselines.values()}
        # (the baselines' runs are finished; tonight's is once the run ended, as after `prober run`)
        finished = {*wanted} - ({run["id"]} if run.get("status") == "running" else set())
        stored = values_of_runs(store, target, sorted(wanted), probes, keep=finished if keep_values else ())
        nothing: EntryValues = {}
        for entry, baseline in baselines.items():
            if baseline.reset is not None:
                continue
            window = baseline.runs
            if min(len(window), config.baseline_runs) < needed:
                outcome.not_tested.append(f"drift: {target} {entry}: {len(window)} comparable baseline run(s), "
                                          f"the night-level tests need {needed}: not tested")
                continue
            found, short = target_tests(target, stored.get((run["id"], entry), nothing),
                                        [stored.get((r["id"], entry), nothing) for r in window],
                                        config, limits.get(target), [r["started_at"] for r in window], p_values)
            tests += found
            if short:
                outcome.not_tested.append(f"drift: {target} {entry}: {short} metric(s) seen in fewer than {needed} "
                                          "comparable baseline runs: not tested")
    outcome.tests = decide(tests, config)
    return outcome
