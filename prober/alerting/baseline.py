"""Which earlier runs a drift baseline may take: only comparable ones.

Only runs from the same site are candidates: (target, site) is what a baseline belongs to.
Two runs are comparable for a target and suite entry when the target completed in both and the
entry ran the same probe version with the same parameters that shape its metrics. Those are every
effective parameter (after --param) except the probe's `label_params`: a list such as latency's
`levels` whose items become a metric label (concurrency). Metrics are matched by their labels, so
level 16 of a [1, 16] sweep is compared with level 16 of a [1, 4, 16] sweep, and a level only one
run has finds no baseline. Anything else that differs (requests per level, max_tokens, a new
probe version) makes a different measurement, and the baseline starts again: "baseline reset:
<what changed>".

The target's configuration hash is stored and shown but does not decide: a changed timeout or
header is not a different measurement, and a changed model is what drift is there to notice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prober.core.probe_registry import probe_class

if TYPE_CHECKING:
    from prober.store import Store


@dataclass(frozen=True)
class Baseline:
    """The comparable earlier runs of one target and suite entry, newest first."""

    target: str
    entry: str
    runs: list[dict[str, Any]] = field(default_factory=list)
    # Set when earlier runs exist but none is comparable: "baseline reset: <what changed>".
    reset: str | None = None
    probe: str = ""                 # the entry's probe in the run judged


def _shaping_params(entry: dict[str, Any]) -> dict[str, Any]:
    probe = probe_class(entry["probe"])
    ignored = probe.label_params if probe is not None else {}   # a probe no longer installed: every parameter counts
    return {key: value for key, value in (entry.get("params") or {}).items() if key not in ignored}


def what_changed(current: dict[str, Any], earlier: dict[str, Any] | None) -> str | None:
    """None when `earlier` (a run_entries row) measured what `current` does; else what differs."""
    if earlier is None:
        return "this entry did not run before"
    if current["probe"] != earlier["probe"]:
        return f"probe {earlier['probe']} -> {current['probe']}"
    if current["probe_version"] != earlier["probe_version"]:
        return f"{current['probe']} probe version {earlier['probe_version']} -> {current['probe_version']}"
    if (current.get("params") or {}) == (earlier.get("params") or {}):
        return None                     # the usual case, decided without loading the probe class
    now, before = _shaping_params(current), _shaping_params(earlier)
    changed = [f"{key} {before.get(key)!r} -> {now.get(key)!r}" for key in sorted(set(now) | set(before))
               if now.get(key) != before.get(key)]
    return ", ".join(changed) or None


@dataclass
class BaselineReads:
    """What select_baselines read for a run, kept so that the next selection for the same run reads
    nothing again: a post-run evaluation selects each target's baselines for the drift tests and
    again for the baseline-reset warnings. Per (run id, target): the longest candidate list read
    with the limit it was read with, and the recorded entries of the candidates. Lives for one
    evaluation (runs stored or pruned later are not seen)."""

    candidates: dict[tuple[str, str], tuple[int, list[dict[str, Any]]]] = field(default_factory=dict)
    entries: dict[tuple[str, str], dict[str, dict[str, dict[str, Any]]]] = field(default_factory=dict)


def read_candidates(store: Store, run: dict[str, Any], targets: list[str], limit: int, reads: BaselineReads) -> None:
    """Keep in `reads` the newest `limit` baseline candidates of each of these targets of `run`
    that it does not hold yet, and the entries they and `run` recorded on them: read together, the
    fleet's nights once (store.completed_runs, store.entries_of_runs), not once per target."""
    missing = [target for target in targets if _held(reads, run, target, limit) is None]
    if not missing:
        return
    found = store.completed_runs(run["suite"], missing, run["started_at"], limit, site=run.get("site"))
    for target in missing:
        reads.candidates[(run["id"], target)] = (limit, found[target])
    unread = {target: [r["id"] for r in [run, *found[target]]
                       if r["id"] not in reads.entries.get((run["id"], target), {})] for target in missing}
    wanted = sorted({run_id for ids in unread.values() for run_id in ids})
    if wanted:
        entries = store.entries_of_runs(wanted, [target for target, ids in unread.items() if ids])
        for target, ids in unread.items():
            held = reads.entries.setdefault((run["id"], target), {})
            held.update({run_id: entries[target][run_id] for run_id in ids})


def _held(reads: BaselineReads | None, run: dict[str, Any], target: str, limit: int) -> list[dict[str, Any]] | None:
    """The newest `limit` candidates of a read kept in `reads` (newest first, so a shorter read is
    its prefix), or all of a read that found the history's end; None when `reads` holds neither."""
    if reads is not None and (run["id"], target) in reads.candidates:
        read_limit, found = reads.candidates[(run["id"], target)]
        if read_limit >= limit or len(found) < read_limit:
            return found[:limit]
    return None


def _candidates(store: Store, run: dict[str, Any], target: str, limit: int,
                reads: BaselineReads | None) -> list[dict[str, Any]]:
    """prober.store.completed_runs for `run` and `target`, or what `reads` holds of them."""
    held = _held(reads, run, target, limit)
    if held is not None:
        return held
    reads = BaselineReads() if reads is None else reads
    read_candidates(store, run, [target], limit, reads)
    return list(reads.candidates[(run["id"], target)][1])


def select_baselines(store: Store, run: dict[str, Any], target: str, size: int,
                     reads: BaselineReads | None = None) -> dict[str, Baseline]:
    """Per suite entry of `run` on `target`: up to `size` comparable earlier runs, newest first.

    Earlier runs are those of the same suite and site, started before `run`, in which `target`
    completed: a latency baseline measured from one site never judges a run from another.
    `reads`: what earlier selections for this run read, used and added to.
    """
    # Runs and their recorded entries only: a baseline never reads a sample. The newest `size`
    # candidates first: when every entry finds them all comparable (the usual night) that is the
    # answer; else up to 4 * size + 8 candidates, the same lists a single long read gives.
    earlier: list[dict[str, Any]] = []
    entries_of: dict[str, dict[str, dict[str, Any]]] = (
        {} if reads is None else reads.entries.setdefault((run["id"], target), {}))
    if run["id"] not in entries_of:
        entries_of[run["id"]] = {row["entry"]: row for row in store.run_entries(run["id"], target=target)}
    current = entries_of[run["id"]]
    for limit in (size, 4 * size + 8):
        found = _candidates(store, run, target, limit, reads)
        earlier = [r for r in found if r["id"] != run["id"]]
        unread = [r["id"] for r in earlier if r["id"] not in entries_of]
        if unread:
            entries_of.update(store.entries_of_runs(unread, [target])[target])
        comparable = {entry_id: [r for r in earlier if what_changed(entry, entries_of[r["id"]].get(entry_id)) is None]
                      for entry_id, entry in current.items()}
        if len(found) < limit or all(len(runs) >= size for runs in comparable.values()):
            break                       # the history holds no more candidates, or none more are needed
    selected: dict[str, Baseline] = {}
    for entry_id, entry in current.items():
        reset = None
        if earlier and not comparable[entry_id]:
            newest = entries_of[earlier[0]["id"]]
            change = (what_changed(entry, newest.get(entry_id)) if newest
                      else "earlier runs recorded no parameters or probe version")
            reset = f"baseline reset: {target} {entry_id}: {change}"
        selected[entry_id] = Baseline(target, entry_id, comparable[entry_id][:size], reset, entry["probe"])
    return selected
