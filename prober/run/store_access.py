"""How a run or a command opens the store: runs left behind by dead processes are marked interrupted
on the way in (from any host, by lease)."""

from __future__ import annotations

from rich.console import Console

from prober.store import Store, StoreReadOnly


def open_store(url: str, console: Console, *, create: bool = True) -> Store:
    """`Store.open`, then every stale run marked interrupted, one line each on `console`. Commands
    that only read pass `create=False`: they never make a database."""
    store = Store.open(url, create=create)
    try:
        stale = store.mark_stale_runs_interrupted()
    except StoreReadOnly:
        # A read-only store (a replica, a copied file) can still be reported on; leave its runs be.
        stale = []
    except BaseException:
        store.close()
        raise
    for run_id in stale:
        console.print(f"run {run_id} was left running by a process that is gone: marked interrupted", markup=False)
    return store
