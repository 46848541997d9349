"""`prober drift-power --target T`: what each drift-tested family of the target's newest run of a
suite can detect here, from the night-to-night spread of its stored baseline: the smallest shift
its two-night test pages within two nights nine times in ten, at the page budget (issue 30)."""

from __future__ import annotations

import socket

from rich.console import Console

from prober.alerting.drift import drift_for_run
from prober.alerting.sensitivity import power_lines
from prober.commands.store_access import require_known_target
from prober.commands.terminal import shown
from prober.core.config import ProberConfig
from prober.core.errors import ConfigError
from prober.run.store_access import open_store


def drift_power_command(config: ProberConfig, out: Console, err: Console, target: str, suite: str) -> None:
    site = config.run_site(socket.gethostname())
    store = open_store(config.store.url, err)
    try:
        require_known_target(store, config, target)
        latest = store.latest_complete_runs(target=target)
        run_id = latest.get((target, suite, site))
        run = store.get_run(run_id) if run_id is not None else None
        if run_id is None or run is None:
            raise ConfigError(f"--target {target!r}: no complete run of suite {suite!r} from site {site!r} "
                              "in the store")
        outcome = drift_for_run(store, run, config.drift, p_values=False)
    finally:
        store.close()
    lines = power_lines(outcome.tests, target) or [
        f"no latency family of {target} has a baseline yet ({'; '.join(outcome.not_tested) or 'no drift tests'})"]
    out.print(shown(f"drift power of {target} (run {run_id}, suite {suite}, page budget "
                    f"{config.drift.false_pages_per_90_nights:g} per 90 nights):"), soft_wrap=True)
    for line in lines:
        out.print(shown(line), soft_wrap=True)
