"""The client's own overhead beside a latency figure: what `prober calibrate` measured on the host
that ran it (prober/probes/calibration.py), and whether it is too large a part of the figure to ignore.

A TTFT figure gets the calibration's TTFT overhead, an ITL figure its ITL overhead, each at the
same percentile (p50 for a median, p99 for any higher percentile) and at the calibration level
nearest its concurrency (the next level up, else the highest). A figure is marked when the
overhead is more than MARK_SHARE of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from prober.store import Store

CALIBRATION_SUITE = "calibrate"     # prober/commands/calibrate.py stores its runs under this suite
MARK_SHARE = 0.10
_FIGURE = re.compile(r"^(ttft|itl)_p(\d+)_ms$")
_OVERHEAD = re.compile(r"^(ttft|itl)_overhead_p(\d+)_ms$")
_SEARCHED_RUNS = 50


@dataclass(frozen=True)
class Overhead:
    value_ms: float
    run_id: str           # the calibration run it came from

    def marks(self, figure_ms: float | None) -> bool:
        """The overhead is more than MARK_SHARE of the figure."""
        return figure_ms is not None and figure_ms > 0 and self.value_ms > MARK_SHARE * figure_ms


class Calibration:
    """One calibration run's overheads: (kind, percentile) -> [(concurrency or None, value)]."""

    def __init__(self, run_id: str, rows: list[dict[str, Any]]) -> None:
        self.run_id = run_id
        self._levels: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for row in rows:
            match = _OVERHEAD.match(row["name"])
            concurrency = (row.get("labels") or {}).get("concurrency")
            if match and isinstance(row.get("value"), (int, float)) and concurrency is not None:
                self._levels.setdefault((match.group(1), int(match.group(2))), []).append(
                    (float(concurrency), float(row["value"])))
        for levels in self._levels.values():
            levels.sort()

    def for_figure(self, name: str, labels: dict[str, Any]) -> Overhead | None:
        """The overhead that applies to a latency figure; None when the figure is not one or the
        calibration has nothing for it."""
        match = _FIGURE.match(name)
        if not match:
            return None
        levels = self._levels.get((match.group(1), 50 if int(match.group(2)) <= 50 else 99))
        if not levels:
            return None
        wanted = labels.get("concurrency")
        if not isinstance(wanted, (int, float)):
            return Overhead(max(value for _, value in levels), self.run_id)   # unknown load: the worst
        at_or_above = [value for level, value in levels if level >= wanted]
        return Overhead(at_or_above[0] if at_or_above else levels[-1][1], self.run_id)


def host_calibration(store: Store, run_id: str, run: dict[str, Any] | None = None) -> Calibration | None:
    """The newest complete calibration of the host that made `run_id`, started no later than that
    run (the nightly suite calibrates first); else the host's newest. None when the host has none.
    `run`: the run's row when the caller read it already (a run's header counts its samples)."""
    run = run if run is not None else store.get_run(run_id)
    if run is None or run.get("suite") == CALIBRATION_SUITE:
        return None
    candidates = [r for r in store.list_runs(limit=_SEARCHED_RUNS, suite=CALIBRATION_SUITE, counts=False)
                  if r.get("host") == run.get("host") and r.get("status") == "complete"]
    if not candidates:
        return None
    earlier = [r for r in candidates if r["started_at"] <= run["started_at"]]
    chosen = (earlier or candidates)[0]
    return Calibration(chosen["id"], store.metrics(chosen["id"]))
