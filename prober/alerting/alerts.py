"""Alert lifecycle: SLO checks and drift tests become alert states, state changes become outbox
events, and the outbox is delivered to every sink.

States per alert identity: `ok` (holds), `pending` (breaking, fewer than `for` runs in a row),
`firing`, `resolved` (held again after firing). Only the two changes `-> firing` and
`firing -> resolved` make an event, so each sink hears once per change however many runs an
alert keeps firing. The state and its event are saved in one transaction with one delivery row
per configured sink; a sink that is down keeps its rows pending and gets them, in order, on a
later run; a delivered row is never sent again.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from prober.alerting.baseline import BaselineReads
from prober.alerting.drift import IN_RANGE_P, LATENCY_GROUP, DriftOutcome, DriftTest, drift_for_run, page_group
from prober.alerting.sinks import AlertmanagerSink, DeliveryError, Sink, make_sink
from prober.alerting.slo import check_run, format_value
from prober.core.config import DEFAULT_NEW_NORMAL_NIGHTS, ProberConfig
from prober.core.records import completed_targets, utcnow

if TYPE_CHECKING:
    from prober.store import Store


@dataclass(frozen=True)
class Observation:
    """One alert identity judged in one run: does it break now?"""

    key: str
    kind: str                     # "slo" | "drift"
    name: str
    severity: str
    target: str
    suite: str
    probe: str
    metric: str
    labels: dict[str, Any]
    value: float | None
    broken: bool
    for_runs: int
    summary: str
    description: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    # Where the judged run probed from: one identity per (target, site), so that a latency alert
    # firing from one site is neither resolved nor repeated by a run from another.
    site: str = ""
    # Drift: an open alert stays firing until the metric is back in range (`detail["in_range"]`),
    # and after this many nights open becomes the new normal (0: resolves when it holds again).
    hold_nights: int = 0

    @property
    def identity(self) -> str:
        return f"{self.key}|site={self.site}" if self.site else self.key


def advance(previous: dict[str, Any] | None, obs: Observation, run_id: str,
            now: dt.datetime) -> tuple[dict[str, Any], str | None]:
    """The alert row after this observation, and the event it makes ("firing", "resolved" or None)."""
    before = previous["state"] if previous else "ok"
    detail = {**obs.detail}
    accepted = (previous.get("detail") or {}).get("new_normal_since") if previous and obs.hold_nights else None
    if accepted is not None:
        detail["new_normal_since"] = accepted      # the level it re-baselined on stays the baseline's start
    if obs.hold_nights and before == "firing" and previous is not None:
        # A persistent regression stays open: judged against the baseline before it began, it is
        # broken until back in range, and after `hold_nights` open it is the new normal.
        obs = replace(obs, broken=not obs.detail.get("in_range", not obs.broken))
        detail["drift_since"] = (previous.get("detail") or {}).get("drift_since", detail.get("drift_since"))
        if obs.broken and previous["breaks"] >= obs.hold_nights:
            row = {**_row(obs, detail, previous["breaks"] + 1, previous.get("fired_at"), now, run_id, now),
                   "state": "resolved"}
            row["detail"]["new_normal_since"] = detail["drift_since"]
            return row, "new_normal"
    breaks = (previous["breaks"] if previous else 0) + 1 if obs.broken else 0
    fired_at = previous.get("fired_at") if previous else None
    resolved_at = previous.get("resolved_at") if previous else None
    event = None
    if obs.broken:
        state = "firing" if before == "firing" or breaks >= obs.for_runs else "pending"
        if state == "firing" and before != "firing":
            event, fired_at, resolved_at = "firing", now, None
    else:
        state = "resolved" if before in ("firing", "resolved") else "ok"
        if before == "firing":
            event, resolved_at = "resolved", now
    return {**_row(obs, detail, breaks, fired_at, resolved_at, run_id, now), "state": state}, event


def _row(obs: Observation, detail: dict[str, Any], breaks: int, fired_at: Any, resolved_at: Any, run_id: str,
         now: dt.datetime) -> dict[str, Any]:
    """The alert row of an observation, its state left to the caller."""
    return {"key": obs.identity, "kind": obs.kind, "name": obs.name, "severity": obs.severity, "target": obs.target,
            "suite": obs.suite, "probe": obs.probe, "metric": obs.metric, "labels": obs.labels, "state": "ok",
            "breaks": breaks, "value": obs.value, "summary": obs.summary,
            "detail": {**detail, "description": obs.description, "for": obs.for_runs, "site": obs.site},
            "fired_at": fired_at, "resolved_at": resolved_at, "updated_at": now, "last_run_id": run_id}


def event_payload(row: dict[str, Any], status: str, run_id: str | None) -> dict[str, Any]:
    """The alert as every sink receives it (JSON-safe); `event_id` is added when it is sent."""
    def iso(value: Any) -> str | None:
        return value.isoformat() if isinstance(value, dt.datetime) else value

    detail = row.get("detail") or {}
    return {"status": status, "alert": {
        "key": row["key"], "kind": row["kind"], "name": row["name"], "severity": row["severity"],
        "target": row["target"], "site": detail.get("site") or "", "suite": row["suite"], "probe": row["probe"],
        "metric": row["metric"], "labels": row.get("labels") or {}, "value": row.get("value"),
        "summary": row["summary"],
        "description": detail.get("description") or row["summary"], "detail": detail,
        "fired_at": iso(row.get("fired_at")), "resolved_at": iso(row.get("resolved_at")), "run_id": run_id}}


def slo_observations(config: ProberConfig, metric_rows: list[dict[str, Any]], run: dict[str, Any]) -> list[Observation]:
    observations = []
    for check in check_run(config.slo, metric_rows, run):
        rule, m = check.rule, check.metric
        observations.append(Observation(
            key=check.key, kind="slo", name=rule.name, severity=rule.severity, target=m["target"],
            suite=run["suite"], probe=m["probe"], metric=m["name"], labels=m.get("labels") or {},
            value=m.get("value"), broken=check.broken, for_runs=rule.for_runs, summary=check.summary,
            description=rule.description,
            detail={"comparator": rule.comparator, "threshold": rule.threshold, "n": m.get("n"),
                    "ci_low": m.get("ci_low"), "ci_high": m.get("ci_high"), "unit": m.get("unit")},
            site=run.get("site") or ""))
    return observations


def drift_observations(tests: list[DriftTest], run: dict[str, Any],
                       new_normal_nights: int = DEFAULT_NEW_NORMAL_NIGHTS) -> list[Observation]:
    """One observation per page group (drift.page_group: the latency families of one probe and
    label set together, every other family with a bad direction alone): broken when a test that
    pages (the two-night window, the trend) found a regression in any family of the group. The
    text names every family that paged (else the first family's test describes the group);
    `detail["families"]` lists them and `detail["members"]` maps every family of the group to its
    key. Families without a bad direction only ever make notices (DriftOutcome.notices). Each says
    whether the group is back in its baseline's range (every test of every family with its
    one-sided p above IN_RANGE_P: what resolves an open alert) and since when the oldest window
    that paged ran (where an open drift starts)."""
    chosen: dict[str, DriftTest] = {}
    in_range: dict[str, bool] = {}
    for test in tests:
        if test.direction == 0:
            continue
        # back in range is judged on the recent windows: a slope over weeks lags a recovery
        in_range[test.key] = in_range.get(test.key, True) and (
            test.trend or test.p_value is None or test.p_value > IN_RANGE_P)
        held = chosen.get(test.key)
        if held is None or (test.pages and not held.pages):
            chosen[test.key] = test
    groups: dict[str, list[DriftTest]] = {}
    for test in chosen.values():
        groups.setdefault(page_group(test), []).append(test)
    observations = []
    for key, members in groups.items():
        paged = [t for t in members if t.pages]
        test = paged[0] if paged else members[0]
        grouped = key != test.key
        metric = LATENCY_GROUP if grouped else test.metric
        # where the open drift begins: the oldest night of the windows that paged
        starts: list[Any] = [t.window_start or run.get("started_at") for t in paged]
        since = min(starts) if starts and None not in starts else test.window_start or run.get("started_at")
        detail = {"test": test.kind, "nights": test.nights, "p_value": test.p_value, "alpha": test.alpha,
                  "effect": test.effect, "min_effect": test.min_effect, "baseline": test.baseline,
                  "n_current": test.n_current, "n_baseline": test.n_baseline, "cells": test.cells,
                  "most_moved": test.worst_cell, "baseline_runs": test.baseline_runs,
                  "in_range": all(in_range[t.key] for t in members), "drift_since": _when(since)}
        if grouped:
            detail["families"] = [t.metric for t in paged]
            detail["members"] = {t.metric: t.key for t in sorted(members, key=lambda t: t.metric)}
        observations.append(Observation(
            key=key, kind="drift", name=f"drift_{metric}", severity="warning", target=test.target,
            suite=run["suite"], probe=test.probe, metric=metric, labels=test.labels, value=test.current,
            broken=bool(paged), for_runs=1, summary=" | ".join(t.summary for t in paged) or test.summary,
            description=(f"{test.kind} test of the last {test.nights} run(s) against the spread of "
                         f"{test.baseline_runs} earlier comparable runs ({test.cells} cell(s) pooled); effect "
                         f"{format_value(test.effect)} (minimum {format_value(test.min_effect)}), one-sided "
                         f"p={format_value(test.p_value)} at level {format_value(test.alpha)} (the target's "
                         "page budget split over tonight's regression tests)"
                         + (f"; families that moved: {', '.join(t.metric for t in paged)} of "
                            f"{', '.join(sorted(t.metric for t in members))}" if grouped and paged else "")),
            detail=detail, site=run.get("site") or "", hold_nights=new_normal_nights))
    return observations


def _when(started: Any) -> Any:
    """A run's start as alert details keep it (JSON): ISO text for a time, as is otherwise."""
    return started.isoformat() if isinstance(started, dt.datetime) else started


@dataclass
class Delivery:
    sink: str
    event_id: int
    status: str
    key: str
    ok: bool
    error: str | None = None


@dataclass
class Evaluation:
    """What a run's evaluation found: `firing` is every alert this run judged that is firing now."""

    firing: list[dict[str, Any]] = field(default_factory=list)
    fired_now: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)   # breaking, fewer than `for` runs in a row
    resolved_now: list[dict[str, Any]] = field(default_factory=list)
    # drift alerts open for the configured nights, now the baseline: one "new normal" notice each
    new_normal: list[dict[str, Any]] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    checked: int = 0
    notes: list[str] = field(default_factory=list)     # what could not be judged, and why


def make_sinks(config: ProberConfig) -> list[Sink]:
    """Every configured sink, ready to send; ConfigError if a URL or secret variable is unset."""
    return [make_sink(sink, config.source) for sink in config.sinks]


def evaluate_run(store: Store, config: ProberConfig, run_id: str, sinks: list[Sink] | None = None,
                 reads: BaselineReads | None = None) -> Evaluation:
    """Judge a finished run's metrics against the SLO rules and its baseline, save the state
    changes with their outbox events, and deliver everything pending to every sink. `reads`: kept
    for the run's baseline_resets."""
    sinks = make_sinks(config) if sinks is None else sinks
    run = store.get_run(run_id)
    if run is None:
        raise ValueError(f"unknown run id {run_id!r}")
    # Only targets that completed are judged: a failed target's partial metrics would mislead.
    judged = [m for m in store.metrics(run["id"]) if m["target"] in completed_targets(run)]
    drift = drift_for_run(store, run, config.drift, reads, keep_values=True) if config.drift.enabled else DriftOutcome()
    observations = (slo_observations(config, judged, run)
                    + drift_observations(drift.tests, run, config.drift.new_normal_nights))
    # A metric row repeated within one run must not count as two consecutive runs.
    observations = list({obs.identity: obs for obs in observations}.values())
    previous = {row["key"]: row for row in store.alerts(keys=[o.identity for o in observations])}
    now = utcnow()
    superseded = hand_over(observations, previous, store.alerts(keys=_member_identities(observations)),
                           run["id"], now)
    rows, events, evaluation = judge(observations, previous, run["id"], now)
    rows, events = superseded[0] + rows, superseded[1] + events
    evaluation.notes = drift.not_tested + drift.notices
    store.save_alert_changes(rows, events, [sink.name for sink in sinks])
    evaluation.deliveries = deliver_outbox(store, sinks)
    _renew_alertmanager(store, sinks, {r["key"] for r in evaluation.firing} - {r["key"] for r in evaluation.fired_now})
    return evaluation


def _member_identities(observations: list[Observation]) -> list[str]:
    """The identities a page group's families had as alerts of their own (before page groups)."""
    suffixes = {obs.identity: obs.identity[len(obs.key):] for obs in observations}
    return [key + suffixes[obs.identity] for obs in observations for key in (obs.detail.get("members") or {}).values()]


def hand_over(observations: list[Observation], previous: dict[str, dict[str, Any]],
              member_rows: list[dict[str, Any]], run_id: str, now: dt.datetime
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A drift alert of a family that now pages in a group (drift.page_group), still firing under
    the family's own key from before page groups were: the group's alert takes it over (its state,
    breaks, start and drift_since, so the regression does not page again) unless the group's is
    firing itself, and the family's row resolves with one event saying which alert took it over.
    `previous` gains the rows taken over; returns the closed rows and their events."""
    rows, events = [], []
    by_key = {row["key"]: row for row in member_rows if row["kind"] == "drift" and row["state"] == "firing"}
    for obs in observations:
        suffix = obs.identity[len(obs.key):]
        for key in (obs.detail.get("members") or {}).values():
            old = by_key.get(key + suffix)
            if old is None or old["key"] == obs.identity:
                continue
            if (previous.get(obs.identity) or {}).get("state") != "firing":
                previous[obs.identity] = {**old, "key": obs.identity}
            closed = {**old, "state": "resolved", "breaks": 0, "resolved_at": now, "updated_at": now,
                      "last_run_id": run_id, "summary": f"{old['summary']} (now part of {obs.name}: {obs.identity})"}
            rows.append(closed)
            events.append({"alert_key": closed["key"], "status": "resolved", "run_id": run_id, "created_at": now,
                           "payload": event_payload(closed, "resolved", run_id)})
    return rows, events


def judge(observations: list[Observation], previous: dict[str, dict[str, Any]], run_id: str, now: dt.datetime
          ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Evaluation]:
    """The alert rows after this run's observations, their outbox events, and what fired or resolved
    (pure: bench/alarm_calibration.py drives it night after night)."""
    # A metric row repeated within one run must not count as two consecutive runs.
    observations = list({obs.identity: obs for obs in observations}.values())
    rows, events, evaluation = [], [], Evaluation(checked=len(observations))
    for obs in observations:
        row, event = advance(previous.get(obs.identity), obs, run_id, now)
        rows.append(row)
        if event is not None:
            events.append({"alert_key": row["key"], "status": event, "run_id": run_id, "created_at": now,
                           "payload": event_payload(row, event, run_id)})
            {"firing": evaluation.fired_now, "resolved": evaluation.resolved_now,
             "new_normal": evaluation.new_normal}[event].append(row)
    evaluation.firing = [row for row in rows if row["state"] == "firing"]
    evaluation.pending = [row for row in rows if row["state"] == "pending"]
    return rows, events, evaluation


def deliver_outbox(store: Store, sinks: list[Sink]) -> list[Delivery]:
    """Send each sink its pending events, oldest first; a sink stops at its first failure so that
    a receiver never sees a resolve before the firing it closes. Failures stay pending."""
    done = []
    for sink in sinks:
        for pending in store.pending_deliveries(sink.name):
            event = {**pending["payload"], "event_id": pending["event_id"]}
            try:
                sink.send(event)
            except DeliveryError as exc:
                store.record_delivery(pending["id"], sink.name, None, str(exc))
                done.append(Delivery(sink.name, pending["id"], pending["status"], pending["alert_key"], False,
                                     str(exc)))
                break
            store.record_delivery(pending["id"], sink.name, utcnow())
            done.append(Delivery(sink.name, pending["id"], pending["status"], pending["alert_key"], True))
    return done


def stand_down(store: Store, sinks: list[Sink], run_id: str, target: str) -> Evaluation:
    """Resolve every alert of `target` that is firing, whatever its checks say, and deliver the
    resolutions through the outbox: the end of `prober drill`, whose alerts must not stay active
    in any sink (an Alertmanager would otherwise hold them for `hold_hours`)."""
    now = utcnow()
    rows, events = [], []
    for row in store.alerts(state="firing"):
        if row["target"] != target:
            continue
        closed = {**row, "state": "resolved", "breaks": 0, "resolved_at": now, "updated_at": now,
                  "last_run_id": run_id}
        rows.append(closed)
        events.append({"alert_key": closed["key"], "status": "resolved", "run_id": run_id, "created_at": now,
                       "payload": event_payload(closed, "resolved", run_id)})
    store.save_alert_changes(rows, events, [sink.name for sink in sinks])
    return Evaluation(resolved_now=rows, deliveries=deliver_outbox(store, sinks))


def _renew_alertmanager(store: Store, sinks: list[Sink], still_firing: set[str]) -> None:
    """Alertmanager closes an alert at its endsAt; re-assert the ones that keep firing (it
    deduplicates by labels, so nobody is notified again). Best effort: the next run renews too."""
    managers = [sink for sink in sinks if isinstance(sink, AlertmanagerSink)]
    if not managers or not still_firing:
        return
    firing_events = [event for key in sorted(still_firing) for event in store.alert_events(key)[-1:]
                     if event["status"] == "firing"]
    for sink in managers:
        # An event still pending for this sink goes out with the outbox, not here.
        delivered = [{**event["payload"], "event_id": event["event_id"]} for event in firing_events
                     if (event["deliveries"].get(sink.name) or {}).get("delivered_at") is not None]
        if delivered:
            try:
                sink.post_alerts(delivered)
            except DeliveryError:
                pass


def describe(evaluation: Evaluation) -> list[str]:
    """Lines for the terminal: what fires, what resolved, and deliveries that failed."""
    new = {row["key"] for row in evaluation.fired_now}
    lines = [f"{'FIRING' if row['key'] in new else 'still firing'} [{row['severity']}] {row['summary']}"
             for row in evaluation.firing]
    lines += [f"resolved: {row['summary']}" for row in evaluation.resolved_now]
    lines += [f"new normal (open {row['breaks'] - 1} nights, now the baseline): {row['summary']}"
              for row in evaluation.new_normal]
    lines += evaluation.notes
    lines += [f"alert delivery to sink {d.sink} failed ({d.error}); it stays in the outbox for the next run"
              for d in evaluation.deliveries if not d.ok]
    return lines
