"""`prober baseline accept`: the user says a metric's level since a time is its normal. The accept
is recorded in the store (revocable), bounds that metric's drift baseline from then on
(drift.stored_limits), and closes its open drift alerts with one "new_normal" event each, which
the next run's outbox delivers. Lines for `prober show` and the report say which accepts hold."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prober.alerting.alerts import event_payload
from prober.core.records import utcnow

if TYPE_CHECKING:
    from prober.store import Store


@dataclass(frozen=True)
class Accepted:
    accept_id: int
    since: dt.datetime
    closed: list[str]          # summaries of the drift alerts it closed


def _drift_start(row: dict[str, Any]) -> dt.datetime | None:
    since = (row.get("detail") or {}).get("drift_since")
    return dt.datetime.fromisoformat(since) if isinstance(since, str) else None


def open_drift_alerts(store: Store, target: str, site: str, metric: str | None) -> list[dict[str, Any]]:
    """The firing drift alerts of `target` from `site` on `metric` (None: any metric), a group's
    (drift.page_group) when `metric` is one of its families."""
    suffix = f"|site={site}" if site else ""
    return [row for row in store.alerts(state="firing")
            if row["kind"] == "drift" and row["target"] == target
            and (metric is None or metric in (row["metric"], *((row.get("detail") or {}).get("members") or {})))
            and (row["key"].endswith(suffix) if suffix else "|site=" not in row["key"])]


def accept_level(store: Store, target: str, site: str, metric: str | None, since: dt.datetime | None,
                 sinks: list[str]) -> Accepted:
    """Record the accept and close the open drift alerts it covers. `since` None: from the start
    of the newest open drift it covers (its regressed nights become the baseline), else from now."""
    alerts = open_drift_alerts(store, target, site, metric)
    if since is None:
        starts = [start for start in map(_drift_start, alerts) if start is not None]
        since = max(starts) if starts else utcnow()
    accept_id = store.add_baseline_accept(target, site, metric, since)
    now = utcnow()
    rows, events = [], []
    for row in alerts:
        closed = {**row, "state": "resolved", "resolved_at": now, "updated_at": now, "breaks": 0,
                  "detail": {**(row.get("detail") or {}), "new_normal_since": since.isoformat(),
                             "accepted": accept_id}}
        rows.append(closed)
        events.append({"alert_key": row["key"], "status": "new_normal", "run_id": row.get("last_run_id"),
                       "created_at": now, "payload": event_payload(closed, "new_normal", row.get("last_run_id"))})
    store.save_alert_changes(rows, events, sinks)
    return Accepted(accept_id, since, [row["summary"] for row in alerts])


def accept_lines(store: Store, target: str, site: str) -> list[str]:
    """One line per accept in force for `target` from `site`."""
    return [f"baseline accepted: {target} {accept['metric'] or 'every metric'} normal since "
            f"{accept['since']:%Y-%m-%d %H:%M} UTC (accept {accept['id']}; `prober baseline revoke "
            f"{accept['id']}` undoes it)" for accept in store.baseline_accepts(target=target, site=site)]
