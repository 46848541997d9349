"""The summaries of a long window's older runs, computed once and kept in the store.

A report draws the older runs of its window one point per period (prober/reports/collect.py): per
metric, the mean of its values over the period's complete runs, with their min and max. The
database aggregates them from the metric rows, and over a year of a fleet that is three million
rows, most of a report's time: yet from one night to the next only the newest and the oldest
period gain or lose a run. So each summary is kept (the store's run_summaries) under a digest of
what it summarizes: the target, suite and site, and the ids of its runs. A week's summary, once
computed, serves every later report; a period of several weeks is combined from its weeks' and
kept as well. Nothing is ever invalidated: another set of runs has another digest, and the metric
rows stay the truth. A store that cannot keep them (read-only, or locked for long) costs the
aggregation again next time, nothing else.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from prober.store import Store

# Bumped whenever what a summary holds, or how it is computed, changes: old keys are then unused.
FORMAT = 1

# A kept summary row: probe, name, labels (the JSON text stored), unit, count, low, high, mean.
SummaryRow = list[Any]


@dataclass(frozen=True)
class PeriodRequest:
    """The runs of one period of one suite and site, week by week (each week's complete run
    ids), and the targets whose summaries over them are wanted."""

    suite: str
    site: str
    targets: tuple[str, ...]
    weeks: tuple[tuple[str, ...], ...]


def summary_key(target: str, suite: str, site: str, run_ids: Iterable[str]) -> str:
    text = json.dumps([FORMAT, target, suite, site, sorted(run_ids)], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def combined(parts: Sequence[Sequence[SummaryRow]]) -> list[SummaryRow]:
    """The summary over the union of disjoint run sets, from each set's summary: counts add, the
    mean is their weighted mean, the unit is the greatest (as the database's max). In the order
    the database groups them (probe, name, labels)."""
    merged: dict[tuple[str, str, str | None], SummaryRow] = {}
    for part in parts:
        for probe, name, labels, unit, count, low, high, mean in part:
            seen = merged.get((probe, name, labels))
            if seen is None:
                merged[(probe, name, labels)] = [probe, name, labels, unit, count, low, high, mean]
                continue
            total = seen[4] + count
            seen[7] = (seen[7] * seen[4] + mean * count) / total
            seen[4], seen[5], seen[6] = total, min(seen[5], low), max(seen[6], high)
            if unit is not None and (seen[3] is None or unit > seen[3]):
                seen[3] = unit
    return sorted(merged.values(), key=lambda row: (row[0], row[1], row[2] is not None, row[2] or ""))


def _aggregated(store: Store, run_ids: Sequence[str], targets: Sequence[str]) -> dict[str, list[SummaryRow]]:
    """target -> its summary over these runs, computed by the database."""
    found: dict[str, list[SummaryRow]] = {target: [] for target in targets}
    for row in store.metric_summary(run_ids, targets, labels_text=True):
        found[row["target"]].append([row["probe"], row["name"], row["labels"], row["unit"], row["count"],
                                     row["low"], row["high"], row["mean"]])
    return {target: combined([rows]) for target, rows in found.items()}


def period_summaries(store: Store, requests: Sequence[PeriodRequest]) -> list[dict[str, list[dict[str, Any]]]]:
    """Per request, target -> its summary rows over the period (dicts: target, probe, name,
    labels decoded, unit, count, low, high, mean), from what the store keeps where it can,
    aggregating and keeping the rest. Labels are shared between rows: read them, do not change
    them."""
    period_keys = [{t: summary_key(t, r.suite, r.site, [i for week in r.weeks for i in week]) for t in r.targets}
                   for r in requests]
    week_keys = [[{t: summary_key(t, r.suite, r.site, week) for t in r.targets} for week in r.weeks]
                 for r in requests]
    kept = store.kept_summaries({key for keys in period_keys for key in keys.values()})
    # the weeks of the periods not kept: most of them are (only the newest week is new each night)
    kept.update(store.kept_summaries({week[target] for request, keys, weeks in zip(requests, period_keys, week_keys,
                                                                                   strict=True)
                                      for target in request.targets if keys[target] not in kept
                                      for week in weeks}))
    parsed: dict[str, list[SummaryRow]] = {}
    fresh: dict[str, str] = {}

    def rows_of(key: str) -> list[SummaryRow] | None:
        if key not in parsed and key in kept:
            parsed[key] = json.loads(kept[key])
        return parsed.get(key)

    def add(key: str, rows: list[SummaryRow]) -> None:
        parsed[key], fresh[key] = rows, json.dumps(rows, separators=(",", ":"))

    for request, keys, weeks in zip(requests, period_keys, week_keys, strict=True):
        wanted = [target for target in request.targets if rows_of(keys[target]) is None]
        for run_ids, week in zip(request.weeks, weeks, strict=True):
            unread = [target for target in wanted if rows_of(week[target]) is None]
            if unread:        # (one aggregation for every target of the week: they ran in the same runs)
                for target, rows in _aggregated(store, run_ids, unread).items():
                    add(week[target], rows)
        for target in wanted:
            if keys[target] not in parsed:
                add(keys[target], combined([parsed[week[target]] for week in weeks]))
    store.keep_summaries(fresh)
    decoded: dict[str, Any] = {}
    texts: dict[str, str] = {}
    found = []
    for request, keys in zip(requests, period_keys, strict=True):
        found.append({target: [_row(target, row, decoded, texts) for row in parsed[keys[target]]]
                      for target in request.targets})
    return found


def _row(target: str, row: SummaryRow, decoded: dict[str, Any], texts: dict[str, str]) -> dict[str, Any]:
    """A summary row as a dict; the texts that recur (labels, probe, name, unit) one object each
    (a year of a fleet is a hundred thousand of these rows)."""
    probe, name, labels, unit, count, low, high, mean = row
    if labels is not None and labels not in decoded:
        decoded[labels] = json.loads(labels)
    return {"target": target, "probe": texts.setdefault(probe, probe), "name": texts.setdefault(name, name),
            "labels": decoded[labels] if labels is not None else None,
            "unit": unit if unit is None else texts.setdefault(unit, unit),
            "count": count, "low": low, "high": high, "mean": mean}

