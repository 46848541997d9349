"""`prober prune`: retention, by the flags or by prober.toml's `[retention]` (prober/store/retention.py)."""

from __future__ import annotations

import datetime as dt

from rich.console import Console
from rich.markup import escape

from prober.core.config import ProberConfig
from prober.core.durations import DURATION_EXAMPLES, parse_duration
from prober.core.errors import ConfigError
from prober.core.records import utcnow
from prober.run.store_access import open_store


def _cutoff(flag: str, text: str | None) -> dt.datetime | None:
    if text is None:
        return None
    period = parse_duration(text)
    if period is None:
        raise ConfigError(f"{flag} {text!r}: expected a duration such as {DURATION_EXAMPLES}")
    return utcnow() - period


def prune_command(config: ProberConfig, out: Console, err: Console, samples_older_than: str | None,
                  outputs_older_than: str | None) -> None:
    if samples_older_than is None and outputs_older_than is None:   # no flags: the configured retention
        samples_older_than = config.retention.samples_older_than
        outputs_older_than = config.retention.outputs_older_than
        flags = ("[retention] samples_older_than", "[retention] outputs_older_than")
    else:
        flags = ("--samples-older-than", "--outputs-older-than")
    samples_before = _cutoff(flags[0], samples_older_than)
    outputs_before = _cutoff(flags[1], outputs_older_than)
    if samples_before is None and outputs_before is None:
        out.print("nothing to prune: [retention] keeps every sample")
        return
    store = open_store(config.store.url, err, create=False)
    try:
        before = store.size_bytes()
        result = store.prune(samples_before=samples_before, outputs_before=outputs_before)
        after = store.size_bytes()
    finally:
        store.close()
    kept = [f"samples older than {samples_older_than}" if samples_before else "",
            f"output text older than {outputs_older_than}" if outputs_before else ""]
    out.print(escape(f"pruned {' and '.join(k for k in kept if k)}: {result.samples_deleted} samples deleted, "
                     f"{result.outputs_cleared} outputs cleared, from {result.runs_pruned} runs; store "
                     f"{before / 1e6:,.1f} MB -> {after / 1e6:,.1f} MB"
                     + (f" ({result.reclaimed})" if result.reclaimed else "")))
