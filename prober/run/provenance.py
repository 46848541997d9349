"""What a run measured on a target: each suite entry's probe version and effective parameters, and
the target's own configuration hash. Stored with the run (store.run_entries, store.run_targets), so
that a drift baseline can take only comparable runs (prober/alerting/baseline.py)."""

from __future__ import annotations

from typing import Any

from prober.core.config import TargetConfig, model_hash
from prober.suites.loader import Suite


def target_config_hash(target: TargetConfig) -> str:
    """A stable hash of one target's configuration (the key's variable name, never the key)."""
    return model_hash(target)


def entry_records(suite: Suite) -> list[dict[str, Any]]:
    """One dict per suite entry: entry id, probe, probe_version and the effective parameters
    (after the suite file, its includes and --param), as JSON."""
    return [{"entry": entry.id, "probe": entry.probe.name, "probe_version": entry.probe.version,
             "params": entry.params.model_dump(mode="json")} for entry in suite.entries]
