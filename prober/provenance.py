"""What a run measured on a target: each suite entry's probe version and effective parameters, and
the target's own configuration hash. Stored with the run (store.run_entries, store.run_targets), so
that a drift baseline can take only comparable runs (reports/baseline.py)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from prober.config import TargetConfig
from suites.loader import Suite


def target_config_hash(target: TargetConfig) -> str:
    """A stable hash of one target's configuration (the key's variable name, never the key)."""
    blob = json.dumps(target.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def entry_records(suite: Suite) -> list[dict[str, Any]]:
    """One dict per suite entry: entry id, probe, probe_version and the effective parameters
    (after the suite file, its includes and --param), as JSON."""
    return [{"entry": entry.id, "probe": entry.probe.name, "probe_version": entry.probe.version,
             "params": entry.params.model_dump(mode="json")} for entry in suite.entries]
