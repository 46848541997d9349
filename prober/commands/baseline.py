"""`prober baseline accept|revoke|list`: accept a target's metric level as its new normal (its
drift baseline starts there, and its open drift alerts close), undo an accept, list them."""

from __future__ import annotations

import socket

from rich.console import Console

from prober.alerting.accept import accept_level, accept_lines
from prober.commands.store_access import require_known_target
from prober.commands.terminal import shown
from prober.core.config import ProberConfig
from prober.core.errors import ConfigError
from prober.reports.collect import parse_since
from prober.run.store_access import open_store


def accept_command(config: ProberConfig, out: Console, err: Console, target: str, metric: str | None,
                   since: str | None) -> None:
    if metric is not None and not metric.strip():
        raise ConfigError("--metric: expected a metric family name such as ttft_ms or hit_rate")
    when = parse_since(since)
    site = config.run_site(socket.gethostname())
    store = open_store(config.store.url, err)
    try:
        require_known_target(store, config, target)
        accepted = accept_level(store, target, site, metric, when, [sink.name for sink in config.sinks])
    finally:
        store.close()
    what = metric or "every metric"
    out.print(shown(f"accepted: {target} {what} normal since {accepted.since:%Y-%m-%d %H:%M} UTC "
                    f"(accept {accepted.accept_id}; `prober baseline revoke {accepted.accept_id}` undoes it)"),
              soft_wrap=True)
    for summary in accepted.closed:
        out.print(shown(f"closed as the new normal: {summary}"), soft_wrap=True)


def revoke_command(config: ProberConfig, out: Console, err: Console, accept_id: int) -> None:
    store = open_store(config.store.url, err)
    try:
        if not store.revoke_baseline_accept(accept_id):
            raise ConfigError(f"no accept {accept_id} in force (see `prober baseline list`)")
    finally:
        store.close()
    out.print(f"revoked accept {accept_id}: the metric's baseline takes its earlier runs again")


def list_command(config: ProberConfig, out: Console, err: Console, target: str | None) -> None:
    site = config.run_site(socket.gethostname())
    store = open_store(config.store.url, err)
    try:
        targets = [target] if target else sorted({a["target"] for a in store.baseline_accepts(site=site)})
        lines = [line for name in targets for line in accept_lines(store, name, site)]
    finally:
        store.close()
    for line in lines or ["no baseline accepts in force"]:
        out.print(shown(line), soft_wrap=True)
