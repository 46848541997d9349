"""What a run holds while it samples, started in order and stopped whatever got started: the room
kept for the final write, the lease, the targets' rows, the signal handlers, the loop-lag monitor
and the sample-writer process.

`start` can fail at any step (the store refuses a write, the writer process cannot start); the
runner calls it inside the block that finishes the run, and `stop_sampling` and `close` undo only
what was started, so that the run is then stored `failed` with the reason instead of staying
`running` until its lease expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from prober.core.config import ProberConfig
from prober.run.lease import RunLease
from prober.run.looplag import LoopLagMonitor
from prober.run.sample_writer import SampleStorageError, SampleWriterProcess
from prober.store import Store

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunResources:
    def __init__(self, store: Store, run_id: str, config: ProberConfig, console: Console) -> None:
        self._store, self._run_id, self._config, self._console = store, run_id, config, console
        self.lease: RunLease | None = None
        self.lag = LoopLagMonitor()
        self.writer: SampleWriterProcess | None = None
        self.interrupted = False      # a SIGINT or SIGTERM cancelled the sampling
        self.started = False          # every resource is up
        self._lag_started = False
        self._signals_on: asyncio.AbstractEventLoop | None = None

    def start(self, targets: Sequence[tuple[str, str]], entries: Sequence[dict[str, Any]]) -> None:
        """Start everything, in this order; `targets`: (name, config hash) of each, in run order."""
        self._store.reserve_room_for_final_write()
        runner = self._config.runner
        self.lease = RunLease.start(self._store, self._run_id, runner.lease_seconds, self._console)
        for name, config_hash in targets:
            self._store.start_target(self._run_id, name, config_hash, entries)
        self._catch_signals()
        self.lag.start()
        self._lag_started = True
        self.writer = SampleWriterProcess(self._config.store.url, runner.max_output_chars,
                                          conformance=runner.conformance == "all")
        self.started = True

    def _catch_signals(self) -> None:
        """SIGINT and SIGTERM cancel the task sampling the targets, which then ends the run interrupted."""
        main_task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            self.interrupted = True
            if main_task is not None:
                main_task.cancel()

        for sig in _SIGNALS:
            loop.add_signal_handler(sig, on_signal)
        self._signals_on = loop

    async def stop_sampling(self) -> str | None:
        """Stop the signal handlers and the lag monitor, and wait for every sample handed over to be
        stored; the problem line when some could not be."""
        if self._signals_on is not None:
            for sig in _SIGNALS:
                self._signals_on.remove_signal_handler(sig)
            self._signals_on = None
        if self._lag_started:
            await self.lag.stop()
        if self.writer is None:
            return None
        try:
            self.writer.flush()
        except SampleStorageError as exc:
            # The disk is full, the database went away: what was stored stays, the run failed.
            return f"samples could not be stored: {exc}"
        return None

    def close(self) -> None:
        """End the writer process and the lease, and free the room kept for the run's final write."""
        if self.writer is not None:
            with contextlib.suppress(SampleStorageError):   # a loss was reported by stop_sampling
                self.writer.close()
        if self.lease is not None:
            self.lease.stop()
        self._store.release_reserved_room()   # the room kept for this write, should the disk be full
