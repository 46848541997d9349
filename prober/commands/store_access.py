"""How commands find what they are asked for in the store: a target or a run the store has never heard
of is a usage error. (Opening the store is `prober.run.store_access.open_store`.)"""

from __future__ import annotations

from typing import Any

from prober.core.config import ProberConfig
from prober.core.errors import ConfigError
from prober.store import Store


def require_known_target(store: Store, config: ProberConfig, name: str | None) -> None:
    """ConfigError for a --target that is neither configured nor in any run of the store."""
    if name is None or name in config.targets:
        return
    known = store.target_names() | set(config.targets)
    if name not in known:
        raise ConfigError(f"--target {name!r}: no such target in {config.source} or in the store "
                          f"(known: {', '.join(sorted(known)) or 'none'})")


LATEST = "latest"


def require_run(store: Store, run_id: str, target: str | None = None) -> dict[str, Any]:
    """The run with this id or unique prefix, or the newest run (of `target`, where given) for
    `latest`; ConfigError when there is none, or when it did not run `target`."""
    if run_id == LATEST:
        newest = store.list_runs(limit=1, target=target, counts=False)
        if not newest:
            of = f" of target {target}" if target is not None else ""
            raise ConfigError(f"latest: no run{of} in {store.url}")
        run_id = newest[0]["id"]
    found = store.get_run(run_id)
    if found is None:
        raise ConfigError(f"no run with id {run_id!r} in {store.url}")
    ran = found.get("targets") or []
    if target is not None and target not in ran:
        raise ConfigError(f"--target {target!r}: run {found['id']} did not run it (it ran: {', '.join(ran) or 'none'})")
    return found
