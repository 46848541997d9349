"""A running run's lease in the store: renewed while the run's process lives, so that a run whose
process was killed (SIGKILL, OOM, a pod evicted) is recognised as stale from any host.

Hostnames cannot decide this: in Docker or Kubernetes every start gets a new one, so "same host,
dead pid" never matches again. The lease needs no shared view of processes, only the store.

Length and renewal: the lease lasts `runner.lease_seconds` (default 600 s) and is renewed every
tenth of that (60 s). A live run's lease only expires if ten renewals in a row fail to land: that
absorbs a SQLite write waiting out its 30 s busy timeout and retries, a PostgreSQL failover, a
process starved of CPU on a busy 2-core machine for minutes, and clock skew between hosts of a few
minutes (each host compares the stored time with its own clock). The price is that a killed run
on another host shows `running` for up to ten minutes; on the same host the dead pid is seen at once.
"""

from __future__ import annotations

import datetime as dt
import threading

from rich.console import Console

from prober.core.records import utcnow
from prober.store import Store

RENEWALS_PER_LEASE = 10


def lease_until(lease_seconds: float) -> dt.datetime:
    return utcnow() + dt.timedelta(seconds=lease_seconds)


class RunLease:
    """Renews a run's lease from a thread (off the event loop: a store write can wait seconds)."""

    def __init__(self, store: Store, run_id: str, lease_seconds: float, console: Console) -> None:
        self._store, self._run_id, self._seconds, self._console = store, run_id, lease_seconds, console
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._renew_until_stopped, name="prober-run-lease", daemon=True)

    @classmethod
    def start(cls, store: Store, run_id: str, lease_seconds: float, console: Console) -> RunLease:
        lease = cls(store, run_id, lease_seconds, console)
        lease._thread.start()
        return lease

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def _renew_until_stopped(self) -> None:
        failing = False
        while not self._stopped.wait(self._seconds / RENEWALS_PER_LEASE):
            try:
                still_running = self._store.renew_lease(self._run_id, lease_until(self._seconds))
            except Exception as exc:   # the store is unreachable for now; the lease has room for that
                if not failing:
                    self._console.print(f"warning: run {self._run_id}: could not renew its lease: "
                                        f"{type(exc).__name__}: {exc}", markup=False)
                failing = True
                continue
            failing = False
            if not still_running:
                self._console.print(f"warning: run {self._run_id} was marked stale by another prober "
                                    f"(its lease had expired); its samples are still stored", markup=False)
                return
