"""`prober compare`: every metric two sides have in common, side by side, with the difference, its
95% interval and a test fit for the metric, sorted by evidence.

A side is one run, or the runs of a target within a window. The tests are those of the store's
statistics module (prober/core/stats.py), chosen by what a metric row is:

- One run on each side: the request is the unit. A share (prober/core/metric_rows.py) is Fisher's
  exact test with Newcombe's interval of the difference; an estimate with a 95% interval on both
  sides (a percentile's distribution-free interval, a paired difference's) is the difference of
  the two by the method of variance estimates recovery (stats.mover_difference), on the log scale
  for positive quantities (the change is relative, as the latency drift test's), its p read off
  the interval (stats.interval_p); a value without an interval (a count, a throughput) is shown
  with its difference and no test.
- Several runs on a side: the run is the unit, as in the drift tests (issue 12: nights differ):
  the mean of one side's per-run values against the spread of the other side's (at least 3 runs),
  the Student-t prediction test the drift tests use (stats.night_prediction_p; log scale and
  its variance floor for positive non-shares).

A timing (ms, tokens/s) of a level where the client's own event loop lagged (`client_saturated`,
docs/measurement-conventions.md) is flagged on that side: shown, never tested.

Many metrics are tested at once, so a difference is called significant when its Benjamini-Hochberg
adjusted p (q) is at most 0.05 (across the table, at most 5% of the differences called significant
are expected to be noise) and it reaches the drift tests' minimum effect for its kind (`[drift]
min_effect`: 20% for a relative change, 0.05 for a share): two runs of one endpoint differ by a
few percent in latency with the load of the machines on the way, which a request-level
interval cannot know, and which is not what a comparison is asked to find. A metric whose suite
entry ran with other parameters or another probe version on one side is a different measurement:
it is listed apart, never compared.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from prober.core import stats
from prober.core.metric_rows import is_proportion, judgeable
from prober.core.probe_registry import find_probe
from prober.core.records import labels_key, utcnow
from prober.reports.plots import Plot, PlotSeries, draw
from prober.store import Store

# The false discovery rate at which a difference is called significant.
FDR = 0.05
# The fewest runs a side needs to be the reference spread of a run-level test (as the drift tests).
FEWEST_REFERENCE_RUNS = 3

# (current entry, other entry) -> None when both measured the same thing, else what differs
# (prober.alerting.baseline.what_changed, handed in by the command layer: reports import no alerting).
WhatChanged = Callable[[dict[str, Any], dict[str, Any] | None], str | None]
# (drift kind: "proportion" | "latency" | "paired", metric name) -> the smallest difference worth
# calling (prober.alerting.drift.min_effect_for over the config's [drift] min_effect).
MinEffect = Callable[[str, str], float]

Kind = Literal["share", "estimate", "value"]


@dataclass(frozen=True)
class Side:
    """One side of a comparison: `runs` newest first; only `target`'s metrics when it is set."""

    name: str
    runs: list[dict[str, Any]]
    target: str | None = None

    @property
    def run_ids(self) -> list[str]:
        return [run["id"] for run in self.runs]


@dataclass
class Compared:
    """One metric on both sides. `difference` is B minus A: relative (B / A - 1) when `relative`,
    else in the metric's unit; `low`/`high` its 95% interval; `n_a`/`n_b` the units behind each
    side (requests, or runs when `runs_a` or `runs_b` is above 1)."""

    target: str
    probe: str
    name: str
    labels: dict[str, Any]
    unit: str | None
    kind: Kind
    a: float | None
    b: float | None
    n_a: int | None
    n_b: int | None
    runs_a: int
    runs_b: int
    relative: bool = False
    difference: float | None = None
    low: float | None = None
    high: float | None = None
    test: str = ""
    min_effect: float = 0.0
    p_value: float | None = None
    q_value: float | None = None
    significant: bool = False
    note: str = ""


@dataclass
class NotComparable:
    target: str
    probe: str
    name: str
    labels: dict[str, Any]
    reason: str


@dataclass
class Comparison:
    a: Side
    b: Side
    compared: list[Compared] = field(default_factory=list)
    not_comparable: list[NotComparable] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)     # metric names found on one side only
    only_b: list[str] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    generated_at: Any = field(default_factory=utcnow)

    @property
    def significant(self) -> list[Compared]:
        return [c for c in self.compared if c.significant]


@dataclass
class _Found:
    """A metric row of one run, with the suite entry that produced it."""

    run_id: str
    row: dict[str, Any]
    entry: dict[str, Any] | None


Identity = tuple[str, str, str, str, str]      # (target or "", probe, entry within its suite, name, labels)


def _entry_key(row: Mapping[str, Any]) -> str:
    """The entry within its suite ("latency", "latency#2"): a latency suite's run and a nightly
    run's latency entry measure the same thing when their parameters agree."""
    entry: str | None = row.get("entry")
    return entry.split(".", 1)[1] if entry and "." in entry else (entry or str(row["probe"]))


# Units of a timing the client's own saturation inflates (docs/measurement-conventions.md).
TIMED_UNITS = frozenset({"ms", "tokens/s"})
CLIENT_SATURATED = "client_saturated"


def _side_rows(store: Store, side: Side, names: Collection[str] | None) -> list[_Found]:
    found = []
    for run in side.runs:
        entries = {(e["target"], e["entry"]): e for e in store.run_entries(run["id"], target=side.target)}
        rows = store.metrics(run["id"], target=side.target)
        # A timing measured while the client's event loop lagged says more about the client than
        # about the endpoint: flagged like a percentile too poorly estimated, shown and never tested.
        saturated = {(r["target"], r["probe"], labels_key(r.get("labels"))) for r in rows
                     if r["name"] == CLIENT_SATURATED and r.get("value")}
        for row in rows:
            if names is not None and row["name"] not in names:
                continue
            cell = (row["target"], row["probe"], labels_key(row.get("labels")))
            if row.get("unit") in TIMED_UNITS and cell in saturated:
                row = {**row, "flags": [*(row.get("flags") or []), CLIENT_SATURATED]}
            found.append(_Found(run["id"], row, entries.get((row["target"], row.get("entry")))))
    return found


def compare(store: Store, a: Side, b: Side, what_changed: WhatChanged, min_effect: MinEffect,
            names: Collection[str] | None = None) -> Comparison:
    """Side `b` against side `a` (the reference): every metric present on both, or those `names`
    (the false discovery rate is then held over them alone)."""
    rows_a, rows_b = _side_rows(store, a, names), _side_rows(store, b, names)
    targets_a, targets_b = {f.row["target"] for f in rows_a}, {f.row["target"] for f in rows_b}
    # One target a side (a run against fp16, another against int4): metrics match across the names.
    by_target = not (len(targets_a) == 1 and len(targets_b) == 1)

    def grouped(rows: list[_Found]) -> dict[Identity, list[_Found]]:
        found: dict[Identity, list[_Found]] = defaultdict(list)
        for f in rows:
            found[(f.row["target"] if by_target else "", f.row["probe"], _entry_key(f.row), f.row["name"],
                   labels_key(f.row.get("labels")))].append(f)
        return found

    group_a, group_b = grouped(rows_a), grouped(rows_b)
    result = Comparison(a, b)
    result.only_a = sorted({identity[3] for identity in set(group_a) - set(group_b)})
    result.only_b = sorted({identity[3] for identity in set(group_b) - set(group_a)})
    for identity in sorted(set(group_a) & set(group_b)):
        found_a, found_b = group_a[identity], group_b[identity]
        first = found_a[0].row
        target = identity[0]    # empty with one target a side: the sides' lines name them
        reason = _not_comparable(found_a, found_b, what_changed)
        if reason is not None:
            result.not_comparable.append(NotComparable(target, first["probe"], first["name"],
                                                       first.get("labels") or {}, reason))
            continue
        result.compared.append(_compare_metric(target, [f.row for f in found_a], [f.row for f in found_b]))
    for compared, q in zip(result.compared, stats.benjamini_hochberg([c.p_value for c in result.compared])):
        kind = "proportion" if compared.kind == "share" else "latency" if compared.relative else "paired"
        compared.min_effect = min_effect(kind, compared.name)
        compared.q_value = q
        compared.significant = (q is not None and not math.isnan(q) and q <= FDR and compared.difference is not None
                                and abs(compared.difference) >= compared.min_effect - 1e-12)
    result.compared.sort(key=_evidence)
    result.plots = overlay_plots(store, a, b, by_target)
    return result


def _evidence(c: Compared) -> tuple[bool, float, str, str]:
    """Strongest evidence first; untested metrics last, by name."""
    return (c.p_value is None, c.p_value if c.p_value is not None else 1.0, c.name, labels_key(c.labels))


def _not_comparable(found_a: Sequence[_Found], found_b: Sequence[_Found], what_changed: WhatChanged) -> str | None:
    """What makes the metric a different measurement on some run, against side A's newest run."""
    reference = found_a[0].entry
    for side, found in (("A", found_a), ("B", found_b)):
        for f in found:
            if f is found_a[0]:
                continue
            if (reference is None) != (f.entry is None):
                return f"run {f.run_id} ({side}): parameters and probe version recorded on one side only"
            if reference is not None and f.entry is not None and (change := what_changed(f.entry, reference)):
                return f"run {f.run_id} ({side}): {change}"
    return None


def _kind(rows: Sequence[dict[str, Any]]) -> Kind:
    if all(is_proportion(r) for r in rows):
        return "share"
    if all(judgeable(r) and _finite(r.get("ci_low")) and _finite(r.get("ci_high")) for r in rows):
        return "estimate"
    return "value"


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _on_log_scale(kind: Kind, rows: Sequence[dict[str, Any]]) -> bool:
    """Positive quantities other than shares change by a factor (latency, throughput)."""
    return kind != "share" and all(_finite(r.get("value")) and r["value"] > 0 and
                                   (not _finite(r.get("ci_low")) or r["ci_low"] > 0) for r in rows)


def _compare_metric(target: str, rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]]) -> Compared:
    first = rows_a[0]
    kind = _kind([*rows_a, *rows_b])
    base = Compared(target, first["probe"], first["name"], first.get("labels") or {}, first.get("unit"), kind,
                    a=None, b=None, n_a=None, n_b=None, runs_a=len(rows_a), runs_b=len(rows_b))
    if len(rows_a) == 1 and len(rows_b) == 1:
        return _request_level(base, rows_a[0], rows_b[0])
    return _run_level(base, rows_a, rows_b)


def _request_level(c: Compared, row_a: dict[str, Any], row_b: dict[str, Any]) -> Compared:
    c.a, c.b, c.n_a, c.n_b = row_a.get("value"), row_b.get("value"), row_a.get("n"), row_b.get("n")
    if c.a is None or c.b is None or not (_finite(c.a) and _finite(c.b)):
        c.note = "no value"
        return c
    if c.kind == "share":
        x_a, n_a = round(c.a * row_a["n"]), int(row_a["n"])
        x_b, n_b = round(c.b * row_b["n"]), int(row_b["n"])
        c.difference, c.low, c.high = stats.proportion_difference(x_a, n_a, x_b, n_b)
        c.p_value = stats.fisher_exact(x_a, n_a, x_b, n_b)
        c.test = "Fisher exact"
        return c
    if c.kind == "value":
        c.relative = c.a > 0 and c.b > 0
        c.difference = c.b / c.a - 1 if c.relative else c.b - c.a
        flags = {flag for row in (row_a, row_b) for flag in row.get("flags") or []}
        c.note = ("client saturated" if CLIENT_SATURATED in flags else "flagged") if flags else "no interval"
        return c
    c.relative = _on_log_scale(c.kind, [row_a, row_b])
    scale: Callable[[float], float] = math.log if c.relative else float

    def estimate(row: dict[str, Any]) -> tuple[float, float, float]:
        return scale(row["value"]), scale(row["ci_low"]), scale(row["ci_high"])

    difference, low, high = stats.mover_difference(estimate(row_a), estimate(row_b))
    c.p_value = stats.interval_p(difference, low, high)
    c.difference, c.low, c.high = _unscaled(c.relative, difference, low, high)
    c.test = "intervals combined (MOVER)" + (", log" if c.relative else "")
    return c


def _unscaled(relative: bool, difference: float, low: float, high: float) -> tuple[float, float, float]:
    if not relative:
        return difference, low, high
    return math.exp(difference) - 1, math.exp(low) - 1, math.exp(high) - 1


def _run_level(c: Compared, rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]]) -> Compared:
    kept_a = [r["value"] for r in rows_a if judgeable(r)]
    kept_b = [r["value"] for r in rows_b if judgeable(r)]
    c.n_a, c.n_b = len(kept_a), len(kept_b)
    if not kept_a or not kept_b:
        c.note = "flagged"
        return c
    c.relative = _on_log_scale(c.kind, [r for r in [*rows_a, *rows_b] if judgeable(r)])
    values_a = [math.log(v) for v in kept_a] if c.relative else kept_a
    values_b = [math.log(v) for v in kept_b] if c.relative else kept_b
    mean_a, mean_b = sum(values_a) / len(values_a), sum(values_b) / len(values_b)
    c.a, c.b = (math.exp(mean_a), math.exp(mean_b)) if c.relative else (mean_a, mean_b)
    difference = mean_b - mean_a
    if max(len(values_a), len(values_b)) < FEWEST_REFERENCE_RUNS:
        c.difference = _unscaled(c.relative, difference, difference, difference)[0]
        c.note = f"a run-level test needs {FEWEST_REFERENCE_RUNS} runs on one side"
        return c
    # The side with more runs is the reference spread (the baseline of the drift test).
    current, reference = (values_b, values_a) if len(values_a) >= len(values_b) else (values_a, values_b)
    floor = stats.LATENCY_LOG_VARIANCE_FLOOR if c.relative else 0.0
    c.p_value, se = stats.night_prediction_p(current, reference, floor)
    c.test = "t over runs" + (", log" if c.relative else "")
    if c.p_value is None or se is None:
        c.difference = _unscaled(c.relative, difference, difference, difference)[0]
        c.note = "no spread across runs"
        return c
    from scipy.stats import t as student_t

    half = float(student_t.ppf(0.975, len(reference) - 1)) * se
    c.difference, c.low, c.high = _unscaled(c.relative, difference, difference - half, difference + half)
    return c


# --- the latency curves of both sides, overlaid -----------------------------------------------------

def overlay_plots(store: Store, a: Side, b: Side, by_target: bool) -> list[Plot]:
    """Each "versus" chart in milliseconds that a probe declares (TTFT and ITL against concurrency or
    rate), drawn from each side's newest run, both sides' series on one chart."""
    newest_a = store.metrics(a.runs[0]["id"], target=a.target) if a.runs else []
    newest_b = store.metrics(b.runs[0]["id"], target=b.target) if b.runs else []
    plots = []
    pairs = ([(t, t) for t in sorted({r["target"] for r in newest_a} & {r["target"] for r in newest_b})] if by_target
             else [(ta, tb) for ta in {r["target"] for r in newest_a} for tb in {r["target"] for r in newest_b}])
    for target_a, target_b in pairs:
        for probe in sorted({r["probe"] for r in newest_a} & {r["probe"] for r in newest_b}):
            rows_a = [r for r in newest_a if r["target"] == target_a and r["probe"] == probe]
            rows_b = [r for r in newest_b if r["target"] == target_b and r["probe"] == probe]
            declared = find_probe(probe)
            for chart in declared.charts(rows_a) if declared is not None and rows_a and rows_b else []:
                units = {r.get("unit") for r in [*rows_a, *rows_b] if r["name"] in chart.metrics}
                if chart.kind != "versus" or units != {"ms"}:
                    continue
                drawn = [(side.name, plot) for side, rows in ((a, rows_a), (b, rows_b))
                         if (plot := draw(chart, rows, [])) is not None]
                if len(drawn) < 2:
                    continue
                title = chart.title if target_a == target_b else f"{chart.title}: {target_a} vs {target_b}"
                if by_target:
                    title = f"{target_a}: {chart.title}"
                plots.append(Plot(title=title, x_label=drawn[0][1].x_label, y_label=drawn[0][1].y_label,
                                  x_kind="log2" if any(p.x_kind == "log2" for _, p in drawn) else drawn[0][1].x_kind,
                                  series=[PlotSeries(f"{name}: {s.label}", s.points) for name, p in drawn
                                          for s in p.series], y_unit="ms"))
    return plots
