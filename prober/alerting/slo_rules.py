"""SLO rules as a user sees them: refused at load when they name a metric no probe produces, and
after each run one state per rule and target (held, broken, no data), a warning for a rule that
applied to a target but matched none of its metrics, one summary line per target, and the terminal
lines `prober run` and `prober show` print about them.

Alert states (the `for` debouncing) stay in prober/alerting/alerts.py; this module only reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prober.alerting.slo import SloCheck, check_run, rule_matches
from prober.core.config import SloRule
from prober.core.errors import ConfigError
from prober.core.probe_registry import RUNNER_METRIC_NAMES, all_metric_names, did_you_mean, probe_class

HELD, BROKEN, NO_DATA = "held", "broken", "no data"


def check_rules_known(rules: Iterable[SloRule], source: str) -> None:
    """ConfigError (exit 2) for the first rule whose metric no probe can produce, naming the
    rule and the nearest metric names."""
    known = all_metric_names()
    if known is None:
        return   # a probe that does not declare its names: nothing can be ruled out
    for rule in rules:
        if rule.metric not in known:
            raise ConfigError(f"{source}: slo rule {rule.name!r}: no probe produces metric {rule.metric!r}"
                              f"{did_you_mean(rule.metric, known)}")


@dataclass(frozen=True)
class RuleState:
    """One rule on one target of one run."""

    rule: SloRule
    target: str
    state: str                                   # HELD | BROKEN | NO_DATA
    matched: int                                 # metric rows the rule's selector matched
    checks: list[SloCheck] = field(default_factory=list)

    @property
    def detail(self) -> str:
        """The worst row: the first broken one, else the first judged one."""
        if not self.checks:
            return "matched no metric" if not self.matched else f"{self.matched} metric(s) without a value"
        worst = next((c for c in self.checks if c.broken), self.checks[0])
        return worst.summary


def _producible(probes: Iterable[str]) -> set[str] | None:
    names = set(RUNNER_METRIC_NAMES)
    for probe in probes:
        declared = getattr(probe_class(probe), "metric_names", None)   # None too for a probe not installed
        if declared is None:
            return None
        names |= declared
    return names


def applies(rule: SloRule, run: dict[str, Any], target: str, probes: Sequence[str]) -> bool:
    """Is `rule` meant for this target in this run: its target and suite selectors allow it and a
    probe the run ran there can produce its metric? (A latency rule says nothing of a caching run.)"""
    if rule.target is not None and rule.target != target:
        return False
    if rule.suite is not None and rule.suite != run.get("suite") and rule.suite not in probes:
        return False
    producible = _producible(probes)
    return producible is None or rule.metric in producible


def rule_states(rules: Iterable[SloRule], run: dict[str, Any], target: str, probes: Sequence[str],
                metric_rows: Iterable[dict[str, Any]]) -> list[RuleState]:
    """The state of every rule that applies to `target` in `run`, whose suite entries ran `probes`."""
    rows = [row for row in metric_rows if row.get("target") == target]
    states = []
    for rule in rules:
        if not applies(rule, run, target, probes):
            continue
        matched = [row for row in rows if rule_matches(rule, row, run)]
        checks = check_run([rule], matched, run)
        state = BROKEN if any(c.broken for c in checks) else HELD if checks else NO_DATA
        states.append(RuleState(rule, target, state, len(matched), checks))
    return states


def unmatched_warnings(states: Iterable[RuleState], run_id: str) -> list[str]:
    """One warning per rule that applied to a target but whose selector matched none of its metrics."""
    lines = []
    for s in states:
        if s.matched == 0:
            selector = ", ".join(f"{k}={v}" for k, v in sorted(s.rule.labels.items()))
            lines.append(f"warning: slo rule {s.rule.name!r} matched no metric of target {s.target} in run "
                         f"{run_id} (metric {s.rule.metric}{f', labels {selector}' if selector else ''})")
    return lines


def slo_line(target: str, states: Sequence[RuleState]) -> str:
    """`<target>: SLOs: N held, M broken, K no data`."""
    count = {state: sum(1 for s in states if s.state == state) for state in (HELD, BROKEN, NO_DATA)}
    return f"{target}: SLOs: {count[HELD]} held, {count[BROKEN]} broken, {count[NO_DATA]} no data"


def alert_state_text(firing: Sequence[dict[str, Any]], pending: Sequence[dict[str, Any]]) -> str:
    """What the alert rules made of a target's breaks: `; 1 firing` and `; pending: fires after 2
    consecutive runs (1 so far)`, so that a broken SLO with exit code 0 says why (its `for`)."""
    parts = [f"{len(firing)} firing"] if firing else []
    for row in pending:
        needed = (row.get("detail") or {}).get("for")
        parts.append(f"pending: {row['name']} fires after {needed} consecutive runs ({row['breaks']} so far)")
    return "".join(f"; {part}" for part in parts)


def target_lines(targets: dict[str, tuple[str, str | None]], slo_states: dict[str, list[RuleState]],
                 firing: Sequence[dict[str, Any]] = (), pending: Sequence[dict[str, Any]] = ()) -> list[str]:
    """The last lines of `prober run`: one per target, `SLOs: N held, M broken, K no data` and the
    alert state (firing, pending with what it waits for) for a target that completed, its status
    and reason for one that did not. `firing`, `pending`: the run's alert rows in those states."""
    lines = []
    for target, (status, reason) in targets.items():
        if status == "complete":
            lines.append(slo_line(target, slo_states.get(target, []))
                         + alert_state_text([r for r in firing if r["target"] == target],
                                            [r for r in pending if r["target"] == target]))
        else:
            lines.append(f"{target}: {status}{f' ({reason})' if reason else ''}; SLOs not checked")
    return lines


def rule_state_lines(run: dict[str, Any], entries: Sequence[dict[str, Any]], metric_rows: Iterable[dict[str, Any]],
                     rules: Sequence[SloRule]) -> list[str]:
    """Each SLO rule's state per completed target (held, broken, no data, with its worst row), then
    the target's summary line."""
    if not rules:
        return ["no SLO rules configured"]
    rows = list(metric_rows)
    lines = []
    for target, state in (run.get("target_status") or {}).items():
        if state["status"] != "complete":
            lines.append(f"{target}: {state['status']}; SLOs not checked")
            continue
        probes = list(dict.fromkeys(e["probe"] for e in entries if e["target"] == target))
        states = rule_states(rules, run, target, probes, rows)
        lines += [f"slo {s.rule.name} on {target}: {s.state}: {s.detail}" for s in states]
        lines.append(slo_line(target, states))
    return lines
