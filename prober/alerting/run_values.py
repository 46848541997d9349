"""The drift values of a target's runs, derived once and kept (the store's run_values table).

A drift test compares tonight with some sixty baseline runs, and deriving a run's values means
reading its ten thousand metric rows per target and filing each into a family: the larger part of
a post-run evaluation and of `prober show`. A finished run's metric rows never change, so the
post-run evaluation keeps what it derived for every run it read, and later evaluations (and `show`,
`drift-power`) read sixty small rows instead. The metric rows stay the truth: a run without kept
values, or with values of another FORMAT (another version of this code), is derived from them
again, and the same values come out either way (tests/alerting/test_run_values.py).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter, truediv
from typing import TYPE_CHECKING, Any, NamedTuple

from prober import __version__
from prober.core.metric_rows import judgeable_value, may_be_share, whole_share
from prober.core.probe_registry import metric_family, pooled_labels, probe_class
from prober.core.records import labels_key
from prober.store import StoreError

if TYPE_CHECKING:
    from prober.store import Store


# --- one value per run and metric family ----------------------------------------------------------

class RunValue(NamedTuple):
    """One metric family's value in one run: `value` (pooled share, mean log p50 or paired
    difference), the counts behind a share, the sampling variance of a paired difference, and the
    value of each cell pooled into it (labels key -> share or log p50), sorted, and their keys.
    (A named tuple: a baseline builds a hundred thousand of them.)"""

    value: float
    successes: int = 0
    n: int = 0
    sampling_variance: float = 0.0
    cells: tuple[tuple[str, float], ...] = ()
    cell_keys: tuple[str, ...] = ()


Identity = tuple[str, str, str, str]          # (kind, probe, metric, family labels key)


def family_labels(probe: str, metric: str, labels: dict[str, Any]) -> dict[str, Any]:
    family = metric_family(probe, metric)
    if family is not None and family.pool_every_label:
        return {}
    pooled = pooled_labels(probe)
    return {k: v for k, v in labels.items() if k not in pooled}


# What run_values reads of a metric row, in this order, and drift_for_run groups the rows by.
RUN_VALUE_COLUMNS = ("run_id", "entry", "probe", "name", "labels", "value", "ci_low", "n", "unit", "flags")
PAIRED_METRICS = ("discordant_a_only", "discordant_b_only", "paired_difference")


class _Cell(NamedTuple):
    """How run_values files the rows of one probe, name, unit and label set, whatever their value."""

    kind: str | None                  # "proportion" or "latency" when the value allows; None: never
    identity: Identity
    key: str                          # the cell's labels key
    labels: dict[str, Any]            # the cell's labels
    family: dict[str, Any]            # the family's labels (pooled labels left out)


@dataclass
class CellFiling:
    """What run_values learned filing rows, kept for the next runs of one target's baseline: the
    same few hundred cells recur in every run, and filing one costs more than testing it. Labels
    and flags are known by a token: the JSON text the store holds (run_values of dicts makes one)."""

    labels: dict[str | None, tuple[dict[str, Any], str]] = field(default_factory=dict)
    flagged: dict[str, bool] = field(default_factory=dict)
    cells: dict[tuple[str, str, str | None, str | None], _Cell] = field(default_factory=dict)
    # (probe, family metric, cell key) -> the family's labels and their key, first seen
    families: dict[tuple[str, str, str], tuple[dict[str, Any], str]] = field(default_factory=dict)

    def cell(self, probe: str, name: str, unit: str | None, labels_token: str | None) -> _Cell:
        found = self.cells.get((probe, name, unit, labels_token))
        if found is not None:
            return found
        decoded = self.labels.get(labels_token)
        if decoded is None:
            labels = (json.loads(labels_token) if labels_token is not None else None) or {}
            decoded = self.labels[labels_token] = (labels, labels_key(labels))
        labels, key = decoded
        family = metric_family(probe, name)
        if may_be_share(probe, name, unit):
            kind: str | None = "proportion"
            metric = name
        elif family is not None and family.kind == "latency":
            kind, metric = "latency", family.name
        else:
            kind, metric = None, name
        kept, kept_key = {}, ""
        if kind is not None:
            kept, kept_key = self.families.get((probe, metric, key)) or self.families.setdefault(
                (probe, metric, key), (kept := family_labels(probe, metric, labels), labels_key(kept)))
        found = self.cells[(probe, name, unit, labels_token)] = _Cell(kind, (kind or "", probe, metric, kept_key),
                                                                      key, labels, kept)
        return found

    def is_flagged(self, token: str | None) -> bool:
        if token is None:
            return False
        found = self.flagged.get(token)
        if found is None:
            found = self.flagged[token] = bool(json.loads(token))
        return found


def run_values(rows: Iterable[dict[str, Any]],
               filed: CellFiling | None = None) -> dict[Identity, tuple[RunValue, dict[str, Any]]]:
    """Every testable metric family of one run's rows of one target, with its labels. `filed`:
    the cells filed by earlier calls (the runs of one baseline), and this call's added to it."""
    filed = CellFiling() if filed is None else filed
    tuples = []
    for row in rows:
        # the tokens stored_run_values knows rows by: a label set's key (which is JSON), and
        # "true" (JSON too) for any flags
        labels = row.get("labels")
        token = labels_key(labels)
        filed.labels.setdefault(token, (labels or {}, token))
        tuples.append((row.get("run_id"), row.get("entry"), row["probe"], row["name"], token, row.get("value"),
                       row.get("ci_low"), row.get("n"), row.get("unit"), "true" if row.get("flags") else None))
    return stored_run_values(tuples, filed)


def stored_run_values(rows: Iterable[Sequence[Any]],
                      filed: CellFiling) -> dict[Identity, tuple[RunValue, dict[str, Any]]]:
    """run_values of rows as the store reads them: tuples of RUN_VALUE_COLUMNS, labels and flags as
    JSON text."""
    # Per family: a cell's (key, count, n, family labels) for a share, (key, log p50, n, family
    # labels) for a latency; a list of them for a family of several cells. Most families are one
    # cell, and a list per family and run would cost more than the rest of the row.
    shares: dict[Identity, Any] = {}
    logs: dict[Identity, Any] = {}
    paired: dict[tuple[str, str], dict[str, tuple[float | None, int | None, dict[str, Any]]]] = defaultdict(dict)
    filed_cell, is_flagged = filed.cells.get, filed.is_flagged       # a hundred thousand rows: looked up once
    for _run, _entry, probe, name, labels, value, ci_low, n, unit, flags in rows:
        kind, identity, key, cell_labels, family = (filed_cell((probe, name, unit, labels))
                                                    or filed.cell(probe, name, unit, labels))
        flagged = flags is not None and is_flagged(flags)
        if name in PAIRED_METRICS and not flagged:
            paired[(probe, key)][name] = (value, n, cell_labels)
        if kind == "proportion":
            if not whole_share(value, n, ci_low, flagged):
                continue
            cell, into = (key, round(value * n), int(n), family), shares
        elif kind == "latency" and judgeable_value(value, flagged) and value > 0:
            cell, into = (key, math.log(value), int(n or 0), family), logs
        else:
            continue
        held = into.get(identity)
        if held is None:
            into[identity] = cell
        elif type(held) is tuple:
            into[identity] = [held, cell]
        else:
            held.append(cell)
    found: dict[Identity, tuple[RunValue, dict[str, Any]]] = {}
    for identity, held in shares.items():
        if type(held) is tuple:
            key, x, total, family = held
            share = x / total
            found[identity] = (RunValue(share, x, total, cells=((key, share),), cell_keys=(key,)), family)
            continue
        keys, successes, totals, families = zip(*held)
        x, total = sum(successes), sum(totals)
        cells = tuple(sorted(zip(keys, map(truediv, successes, totals))))
        found[identity] = (RunValue(x / total, x, total, cells=cells, cell_keys=_keys(cells)), families[-1])
    for identity, held in logs.items():
        if type(held) is tuple:
            key, log_value, size, family = held
            # the mean of one log p50 is itself
            found[identity] = (RunValue(log_value, n=size, cells=((key, log_value),), cell_keys=(key,)), family)
            continue
        keys, log_values, sizes, families = zip(*held)
        cells = tuple(sorted(zip(keys, log_values)))
        found[identity] = (RunValue(sum(log_values) / len(log_values), n=sum(sizes), cells=cells,
                                    cell_keys=_keys(cells)), families[-1])
    for (probe, key), ((a, b, items), labels) in _discordant(paired).items():
        variance = ((a + b) - (a - b) ** 2 / items) / items ** 2
        found[("paired", probe, "paired_difference", key)] = (
            RunValue((a - b) / items, n=items, sampling_variance=variance), labels)
    return found


def _keys(cells: tuple[tuple[str, float], ...]) -> tuple[str, ...]:
    return tuple(map(itemgetter(0), cells))


def judged_names(probes: Iterable[str]) -> set[str]:
    """The metric names `run_values` may read from these probes' rows besides shares (which it
    finds by their unit, "ratio"): the latency families' metrics and a paired comparison's three."""
    names = set(PAIRED_METRICS)
    for probe in probes:
        for family in getattr(probe_class(probe), "metric_families", ()):
            if family.kind == "latency":
                names.update((family.name, *family.metrics))
    return names


def _discordant(paired: dict[tuple[str, str], dict[str, tuple[float | None, int | None, dict[str, Any]]]]
                ) -> dict[tuple[str, str], tuple[tuple[int, int, int], dict[str, Any]]]:
    """((a_only, b_only, items), labels) per paired comparison (probe, labels key) of one run, from
    its unflagged rows' (value, n, labels) by metric name."""
    counts = {}
    for group, named in paired.items():
        a_only, b_only, difference = (named.get(name) for name in PAIRED_METRICS)
        if a_only is None or b_only is None or difference is None:
            continue
        (a, _, _), (b, _, _), (_, items, labels) = a_only, b_only, difference
        if items and a is not None and b is not None:
            # a copy: the rows' labels are shared
            counts[group] = ((round(a), round(b), int(items)), dict(labels))
    return counts


# --- kept in the store ----------------------------------------------------------------------------

# Kept values name the code that derived them; bump the second part when the derivation changes
# between releases (families, pooling, what a share or a latency cell is).
FORMAT = f"{__version__}/1"

EntryValues = dict[Identity, tuple[RunValue, dict[str, Any]]]


def encode(entries: dict[str | None, EntryValues]) -> str:
    """A run's values on one target as JSON text: entry -> [[identity, value, family labels], ...]."""
    # (a value's cell keys are its cells' keys: not written twice)
    return json.dumps({entry: [[list(identity), [v.value, v.successes, v.n, v.sampling_variance, v.cells], family]
                               for identity, (v, family) in values.items()]
                       for entry, values in entries.items() if entry is not None}, separators=(",", ":"))


def decode(text: str) -> dict[str, EntryValues]:
    found: dict[str, EntryValues] = {}
    for entry, values in json.loads(text).items():
        found[entry] = {
            (identity[0], identity[1], identity[2], identity[3]): (
                RunValue(value[0], value[1], value[2], value[3], cells := tuple(map(tuple, value[4])),
                         _keys(cells)), family)
            for identity, value, family in values}
    return found


def values_of_runs(store: Store, target: str, run_ids: Sequence[str], probes: Collection[str],
                   keep: Collection[str] = ()) -> dict[tuple[str, str | None], EntryValues]:
    """(run id, entry) -> the drift values of `target` in each of these runs: read where kept,
    derived from the metric rows where not. The derived values of the runs in `keep` (finished
    ones) are kept for the next reader."""
    kept = store.derived_run_values(run_ids, target, FORMAT)
    found: dict[tuple[str, str | None], EntryValues] = {}
    for run_id, text in kept.items():
        for entry, values in decode(text).items():
            found[(run_id, entry)] = values
    missing = [run_id for run_id in run_ids if run_id not in kept]
    if not missing:
        return found
    # (a row is filed by its own probe's families: which other probes the query's names came from
    # changes what is read, never what a run's values are)
    rows = store.metric_tuples_of_runs(missing, target, RUN_VALUE_COLUMNS, units=("ratio",),
                                       names=judged_names(probes))
    grouped: dict[tuple[str, str | None], list[tuple[Any, ...]]] = {}
    for run_and_entry, group in groupby(rows, itemgetter(0, 1)):     # by run, then as written
        grouped.setdefault(run_and_entry, []).extend(group)
    filed = CellFiling(labels={})
    derived: dict[str, dict[str | None, EntryValues]] = {run_id: {} for run_id in missing}
    for (run_of, entry_of), entry_rows in grouped.items():
        found[(run_of, entry_of)] = derived[run_of][entry_of] = stored_run_values(entry_rows, filed)
    try:
        store.keep_run_values([(run_id, target, FORMAT, encode(derived[run_id])) for run_id in missing
                               if run_id in keep])
    except StoreError:
        # Kept values only save work: a store that cannot take them now (read-only, full, another
        # evaluation keeping the same run at this moment) leaves them to be derived again.
        pass
    return found
