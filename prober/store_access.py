"""How commands open the store: runs left behind by dead processes are marked interrupted on the
way in (from any host, by lease), and a name the store has never heard of is a usage error."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from rich.console import Console

from prober.core.config import ProberConfig
from prober.core.errors import ConfigError
from store import Store


def open_store(url: str, console: Console) -> Store:
    """`Store.open`, then every stale run marked interrupted, one line each on `console`."""
    store = Store.open(url)
    try:
        stale = store.mark_stale_runs_interrupted()
    except sa.exc.OperationalError as exc:
        # A read-only store (a replica, a copied file) can still be reported on; leave its runs be.
        if "readonly" not in str(exc.orig).lower() and "read-only" not in str(exc.orig).lower():
            store.close()
            raise
        stale = []
    except BaseException:
        store.close()
        raise
    for run_id in stale:
        console.print(f"run {run_id} was left running by a process that is gone: marked interrupted", markup=False)
    return store


def require_known_target(store: Store, config: ProberConfig, name: str | None) -> None:
    """ConfigError for a --target that is neither configured nor in any run of the store."""
    if name is None or name in config.targets:
        return
    known = store.target_names() | set(config.targets)
    if name not in known:
        raise ConfigError(f"--target {name!r}: no such target in {config.source} or in the store "
                          f"(known: {', '.join(sorted(known)) or 'none'})")


def require_run(store: Store, run_id: str, target: str | None = None) -> dict[str, Any]:
    """The run with this id or unique prefix; ConfigError when there is none, or when it did not
    run `target`."""
    found = store.get_run(run_id)
    if found is None:
        raise ConfigError(f"no run with id {run_id!r} in {store.url}")
    ran = found.get("targets") or []
    if target is not None and target not in ran:
        raise ConfigError(f"--target {target!r}: run {found['id']} did not run it (it ran: {', '.join(ran) or 'none'})")
    return found
