"""SLO rules against stored metrics: which metric rows a rule covers, and whether a value breaks it.

A rule states the healthy condition (`ttft_p50_ms <= 800`); it breaks when that is false. Pure
functions over the dicts `store.Store.metrics()` and `store.Store.get_run()` return; the alert
state (the `for` debouncing) lives in prober/alerting/alerts.py.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prober.core.config import SloRule
from prober.core.records import label_text, labels_key

_HOLDS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


def _same_label_value(wanted: Any, actual: Any) -> bool:
    # TOML gives 16 where a metric may carry 16 or "16"; both mean the same selector.
    return wanted == actual or str(wanted) == str(actual)


def rule_matches(rule: SloRule, metric_row: dict[str, Any], run_row: dict[str, Any] | None) -> bool:
    """Does `rule` cover this metric row? Name, target, suite (the run's suite or the metric's
    probe) and every selector label must match; a metric may carry more labels than the selector."""
    if metric_row.get("name") != rule.metric:
        return False
    if rule.target is not None and metric_row.get("target") != rule.target:
        return False
    if rule.suite is not None:
        suites = {metric_row.get("probe"), (run_row or {}).get("suite")}
        if rule.suite not in suites:
            return False
    labels = metric_row.get("labels") or {}
    return all(key in labels and _same_label_value(value, labels[key]) for key, value in rule.labels.items())


def rule_breaks(rule: SloRule, value: float | None) -> bool:
    """True when `value` violates the rule's healthy condition. A missing or NaN value breaks
    nothing: there is no measurement to judge (the run's error rate speaks for failed requests)."""
    if value is None or math.isnan(value):
        return False
    return not _HOLDS[rule.comparator](float(value), rule.threshold)


@dataclass(frozen=True)
class SloCheck:
    """One rule judged against one metric row of a run."""

    rule: SloRule
    metric: dict[str, Any]
    broken: bool

    @property
    def key(self) -> str:
        """The alert identity: one per rule, target, probe and label set."""
        m = self.metric
        return f"slo|{self.rule.name}|{m['target']}|{m['probe']}|{labels_key(m.get('labels'))}"

    @property
    def summary(self) -> str:
        m = self.metric
        where = label_text(m.get("labels"))
        state = "breaks" if self.broken else "holds"
        return (f"{self.rule.name}: {m['target']} {m['name']}{f' ({where})' if where else ''} = "
                f"{format_value(m.get('value'))} {state} {self.rule.comparator} {format_value(self.rule.threshold)}")


def check_run(rules: Iterable[SloRule], metric_rows: Iterable[dict[str, Any]],
              run_row: dict[str, Any]) -> list[SloCheck]:
    """Every (rule, metric row) pair that matches and has a value to judge. A flagged row (for
    example a percentile whose sample cannot bound its interval) is never judged."""
    rows = [row for row in metric_rows if not row.get("flags")]
    return [SloCheck(rule, row, rule_breaks(rule, row.get("value")))
            for rule in rules for row in rows
            if rule_matches(rule, row, run_row) and row.get("value") is not None
            and not math.isnan(row["value"])]


def format_value(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"
