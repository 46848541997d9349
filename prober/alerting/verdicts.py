"""The verdicts a report shows: each SLO rule judged against a run's metric rows, the "baseline
reset" lines of suite entries that no earlier run is comparable with, and the levels accepted as
normal (`prober baseline accept`). The command layer hands one to reports.collect, which renders
them without importing alerting code."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prober.alerting.accept import accept_lines
from prober.alerting.baseline import select_baselines
from prober.alerting.slo import SloCheck, check_run
from prober.core.config import DriftConfig, SloRule


@dataclass(frozen=True)
class ReportVerdicts:
    rules: Sequence[SloRule]
    # None or disabled: no drift baselines, so no reset lines
    drift: DriftConfig | None = None

    def slo_checks(self, metric_rows: Sequence[dict[str, Any]], run_row: dict[str, Any]) -> list[SloCheck]:
        return check_run(self.rules, metric_rows, run_row)

    def baseline_resets(self, store: Any, run: dict[str, Any], target: str) -> list[str]:
        """The entries whose baseline starts again, and the levels accepted as normal."""
        if self.drift is None or not self.drift.enabled:
            return []
        resets = [b.reset for b in select_baselines(store, run, target, self.drift.baseline_runs).values() if b.reset]
        return [*resets, *accept_lines(store, target, run.get("site") or "")]
