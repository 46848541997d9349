"""The verdicts a report shows: each SLO rule judged against a run's metric rows, the "baseline
reset" lines of suite entries that no earlier run is comparable with, and the levels accepted as
normal (`prober baseline accept`). The command layer hands one to reports.collect, which renders
them without importing alerting code."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prober.alerting.accept import accept_lines
from prober.alerting.baseline import BaselineReads, read_candidates, select_baselines
from prober.alerting.slo import SloCheck, check_run
from prober.core.config import DriftConfig, SloRule
from prober.core.records import completed_targets

if TYPE_CHECKING:
    from prober.store import Store


@dataclass(frozen=True)
class ReportVerdicts:
    rules: Sequence[SloRule]
    # None or disabled: no drift baselines, so no reset lines
    drift: DriftConfig | None = None
    # What the baselines of the report's runs read: a run's targets are read together, once
    # (a fleet report selects forty baselines; one store read each was a sixth of its cost).
    _reads: BaselineReads = field(default_factory=BaselineReads, compare=False, repr=False)

    # The states of a target at a site, worst first: the order of the verdict table.
    FAILED = "failed"
    SLO_BROKEN = "SLO broken"
    DRIFTING = "drifting"
    NO_DATA = "no data"
    HEALTHY = "healthy"
    states = (FAILED, SLO_BROKEN, DRIFTING, NO_DATA, HEALTHY)

    def target_state(self, status: str | None, slo_broken: bool, firing_kinds: Collection[str]) -> str:
        """A target's state at a site: `status` its own status in its newest finished run (None:
        no run in the window), `slo_broken` whether an SLO rule broke on that run's metrics,
        `firing_kinds` the kinds ("slo", "drift") of its alerts firing now. A run that could not
        complete outranks what its metrics say (it may have stored few); a broken SLO outranks a
        drift, which only says the figure moved."""
        if status is None:
            return self.NO_DATA
        if status in ("failed", "interrupted"):
            return self.FAILED
        if slo_broken or "slo" in firing_kinds:
            return self.SLO_BROKEN
        if "drift" in firing_kinds:
            return self.DRIFTING
        return self.HEALTHY

    @property
    def fingerprint(self) -> str:
        """What a run's page is judged by (its SLO columns): the rules as configured. A page kept
        from an earlier report is drawn again when they change (prober/reports/site.py)."""
        return json.dumps([rule.model_dump(mode="json") for rule in self.rules], sort_keys=True)

    def slo_checks(self, metric_rows: Sequence[dict[str, Any]], run_row: dict[str, Any]) -> list[SloCheck]:
        return check_run(self.rules, metric_rows, run_row)

    def baseline_resets(self, store: Store, run: dict[str, Any], target: str) -> list[str]:
        """The entries of `target` in `run` (its runs row) whose baseline starts again, and the
        levels accepted as normal."""
        if self.drift is None or not self.drift.enabled:
            return []
        size = self.drift.baseline_runs
        read_candidates(store, run, sorted({target, *completed_targets(run)}), size, self._reads)
        resets = [b.reset for b in select_baselines(store, run, target, size, self._reads).values() if b.reset]
        return [*resets, *accept_lines(store, target, run.get("site") or "")]
