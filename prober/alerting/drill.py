"""`prober drill`: a fire drill for the alert path, end to end, without spending money.

A small latency suite runs against the bundled emulator a few times with a healthy scenario
(which builds the drift baseline), then twice with a regressed one (a slow first token). A drill
rule (TTFT p50 <= 300 ms at concurrency 1) fires on the first regressed run and the drift tests
on the second (drift pages a regression that persists two nights: prober/alerting/drift.py), and
the alerts go through the real outbox to every sink configured in prober.toml. The store is a
temporary SQLite file unless one is given, so a drill never mixes with real history.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from prober.alerting.alerts import Delivery, Evaluation, event_payload, make_sinks, stand_down
from prober.alerting.sinks import webhook_body
from prober.core.config import EmulatorTarget, ProberConfig, SloRule, TargetConfig
from prober.core.controlchars import escape_controls

DRILL_TARGET = "drill"
HEALTHY_FIRST_TOKEN_MS = 20
REGRESSED_FIRST_TOKEN_MS = 500
DRILL_RULE = SloRule(name="drill_ttft_p50", metric="ttft_p50_ms", suite="latency", target=DRILL_TARGET,
                     labels={"concurrency": 1}, comparator="<=", threshold=300, severity="critical",
                     description="prober drill: TTFT p50 at concurrency 1 must stay <= 300 ms")
# Small enough for seconds per run, large enough for the rank test to see a 25x slower first token.
DRILL_PARAMS = {"levels": [1, 2], "requests_per_level": 6, "warmup": 1, "max_tokens": 16}
# Drift pages on a regression's second night.
REGRESSED_RUNS = 2


class JudgedRun(Protocol):
    """What the drill reads of one judged run (prober.commands.run.JudgedRun)."""

    run_id: str
    status: str
    exit_code: int
    problems: list[str]
    alerts: Evaluation | None


# Runs a suite and judges it, as `prober run` does: (config, console, suite, targets, overrides).
# Passed in by the command layer, so that alerting never imports the runner.
RunAndJudge = Callable[[ProberConfig, Console, str, list[str], dict[str, Any]], JudgedRun]


@dataclass
class DrillResult:
    exit_codes: list[int] = field(default_factory=list)
    fired: list[dict[str, Any]] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    sinks: list[str] = field(default_factory=list)
    temporary_store: bool = True
    first_event_id: str | None = None   # as sinks see it (X-Prober-Event), with the store's identity
    resolved: list[dict[str, Any]] = field(default_factory=list)   # every alert the drill closed at its end
    resolutions: list[Delivery] = field(default_factory=list)

    @property
    def stood_down(self) -> bool:
        """Every sink accepted the resolution of every alert the drill closed."""
        delivered = {(d.sink, d.key) for d in self.resolutions if d.ok and d.status == "resolved"}
        return all((sink, row["key"]) in delivered for sink in self.sinks for row in self.resolved)

    @property
    def ok(self) -> bool:
        """Healthy runs held, the regressed runs fired, and every sink got every firing alert."""
        healthy, regressed = self.exit_codes[:-REGRESSED_RUNS], self.exit_codes[-REGRESSED_RUNS:]
        delivered = {(d.sink, d.key) for d in self.deliveries if d.ok and d.status == "firing"}
        return (all(code == 0 for code in healthy) and regressed == [1] * REGRESSED_RUNS and bool(self.fired)
                and all((sink, row["key"]) in delivered for sink in self.sinks for row in self.fired)
                and self.stood_down)


def drill_config(config: ProberConfig, scenario: Path, store_url: str, healthy_runs: int) -> ProberConfig:
    """The user's sinks and drift settings, with the drill's own target, rule and store."""
    drilled = config.model_copy(deep=True)
    drilled.targets = {DRILL_TARGET: TargetConfig(name=DRILL_TARGET, protocol="anthropic", model="emulator-1",
                                                  emulator=EmulatorTarget(scenario=str(scenario)))}
    drilled.slo = [DRILL_RULE]
    drilled.store.url = store_url
    drilled.runner.progress = False
    drilled.drift.enabled = True
    drilled.drift.baseline_runs = healthy_runs
    drilled.drift.min_baseline_runs = healthy_runs
    return drilled


def run_drill(config: ProberConfig, console: Console, run_and_judge: RunAndJudge, store_url: str | None = None,
              healthy_runs: int = 3, regressed_scenario: str | None = None) -> DrillResult:
    """`regressed_scenario`: the text of the scenario the last run uses (a validated scenario file,
    e.g. examples/scenarios/regression.toml); by default the healthy one with a slow first token."""
    result = DrillResult(sinks=[sink.name for sink in config.sinks], temporary_store=store_url is None)
    make_sinks(config)   # an unset URL or secret variable fails now, not after the runs
    with tempfile.TemporaryDirectory(prefix="prober-drill-") as tmp:
        scenario = Path(tmp) / "scenario.toml"
        drilled = drill_config(config, scenario, store_url or f"sqlite:///{Path(tmp) / 'drill.db'}", healthy_runs)
        rounds = healthy_runs + REGRESSED_RUNS
        for round_ in range(rounds):
            regressed = round_ >= healthy_runs
            delay = REGRESSED_FIRST_TOKEN_MS if regressed else HEALTHY_FIRST_TOKEN_MS
            if regressed and regressed_scenario is not None:
                scenario.write_text(regressed_scenario)
                shown = "REGRESSED emulator, the given scenario"
            else:
                scenario.write_text(f"first_token_delay_ms = {delay}\n")
                shown = f"{'REGRESSED' if regressed else 'healthy'} emulator, first token after {delay} ms"
            console.print(f"drill run {round_ + 1}/{rounds}: {shown}", markup=False)
            outcome = run_and_judge(drilled, console, "latency", [DRILL_TARGET], DRILL_PARAMS)
            result.exit_codes.append(outcome.exit_code)
            evaluation = outcome.alerts
            if evaluation is None:
                console.print(f"  run {outcome.run_id} did not complete ({outcome.status}): "
                              f"{'; '.join(outcome.problems)}", markup=False)
                continue
            for row in evaluation.fired_now:
                console.print(f"  FIRING [{row['severity']}] {escape_controls(row['summary'])}", markup=False)
            result.deliveries += evaluation.deliveries
            if regressed:
                result.fired += evaluation.fired_now
        result.first_event_id = _first_firing_event_id(drilled.store.url, result.fired)
        _show_arrivals(result, console)
        _stand_down(drilled, result, console)
        _show_verdict(result, console)
    return result


def _stand_down(drilled: ProberConfig, result: DrillResult, console: Console) -> None:
    """Resolve what the drill fired in every sink before it exits: a drill is not an incident,
    and an Alertmanager would otherwise keep its critical alert active for `hold_hours`."""
    from prober.store import Store

    with Store.open(drilled.store.url) as store:
        # Only the drill's own target: a --db store may hold real history and real alerts.
        last_run = store.list_runs(limit=1, target=DRILL_TARGET, counts=False)
        closed = stand_down(store, make_sinks(drilled), last_run[0]["id"] if last_run else "drill", DRILL_TARGET)
    result.resolved, result.resolutions = closed.resolved_now, closed.deliveries
    for delivery in closed.deliveries:
        state = "delivered" if delivery.ok else f"FAILED ({escape_controls(delivery.error or '')})"
        console.print(f"  sink {delivery.sink}: resolved event {delivery.event_id} {state}: {delivery.key}",
                      markup=False)
    if not closed.resolved_now:
        console.print("drill: no alert was left firing to resolve", markup=False)
    elif not result.sinks:
        console.print(f"drill: resolved its {len(closed.resolved_now)} alert(s) (no sinks to tell)", markup=False)
    elif result.stood_down:
        console.print(f"drill: resolved its {len(closed.resolved_now)} alert(s) in every sink; none stays active",
                      markup=False)
    else:
        console.print("drill: some resolutions were NOT delivered: those alerts may stay active in that sink "
                      "until their endsAt", markup=False)


def _first_firing_event_id(store_url: str, fired: list[dict[str, Any]]) -> str | None:
    from prober.store import Store

    if not fired:
        return None
    with Store.open(store_url) as store:
        events = [e for e in store.alert_events(fired[0]["key"]) if e["status"] == "firing"]
    return events[-1]["event_id"] if events else None


def _show_arrivals(result: DrillResult, console: Console) -> None:
    if not result.sinks:
        console.print("no [[sinks]] configured in prober.toml: nothing was sent. A webhook sink would have "
                      "received, for the first alert:", markup=False)
        if result.fired:
            payload = {**event_payload(result.fired[0], "firing", result.fired[0]["last_run_id"]),
                       "event_id": result.first_event_id}
            console.print(json.dumps(webhook_body(payload), indent=2, default=str), markup=False)
    for delivery in result.deliveries:
        # A temporary store is deleted when the drill ends: nothing would ever retry from it.
        retry = ("the drill's store is temporary, so nothing retries it: fix the sink and drill again"
                 if result.temporary_store else "stays in the outbox of that store for its next run")
        state = "delivered" if delivery.ok else f"FAILED ({escape_controls(delivery.error or '')}); {retry}"
        console.print(f"  sink {delivery.sink}: {delivery.status} event {delivery.event_id} {state}: "
                      f"{delivery.key}", markup=False)


def _show_verdict(result: DrillResult, console: Console) -> None:
    if not result.ok:
        verdict = "the drill did NOT pass"
    elif result.sinks:
        verdict = "the regressed run fired and every configured sink received its alerts"
    else:
        verdict = "the regressed run fired (no sinks to deliver to)"
    console.print(f"drill: {verdict}", markup=False)
