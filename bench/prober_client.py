"""The client under test: prober's own request path, in its own process.

Each level is what `prober run` does for one level of the latency suite, minus the progress bar:
the latency probe's `run` with a `TargetSession` (run budget, per-target gate, retries), the
OpenAI adapter on prober's transport, a `SampleWriterProcess` with conformance checking on or off, and a
real SQLite sample writer storing every sample, plus the event-loop lag monitor the runner keeps,
on the event loop `prober run` uses (prober/run/event_loop.py: uvloop where installed, or as
$PROBER_EVENT_LOOP says).
TTFT is `Exchange.ttft_ms`; the store is checked afterwards to hold one row per request.
"""

from __future__ import annotations

import collections
import itertools
import os
import socket
import time
import uuid
from dataclasses import dataclass
from multiprocessing.connection import Connection
from time import perf_counter_ns

import machine
from gc_pauses import GcPauses
from rich.console import Console
from sse_server import MODEL

import prober
from prober.core.collector import quiet_garbage_collector
from prober.core.config import RunnerConfig, TargetConfig
from prober.core.records import Exchange, Run, utcnow
from prober.probes.latency import LatencyParams, LatencyProbe
from prober.run import event_loop
from prober.run.budget import RunBudget
from prober.run.looplag import LoopLagMonitor
from prober.run.progress import RunProgress
from prober.run.sample_writer import SampleWriterProcess
from prober.run.session import TargetGate, TargetSession
from prober.store import Store
from prober.targets import make_adapter


@dataclass
class _RecordingSession(TargetSession):
    """A TargetSession that also hands the benchmark the Exchanges its closed loops returned."""

    exchanges: list[Exchange] | None = None

    async def closed_loop(self, **kwargs) -> list[Exchange]:
        results = await super().closed_loop(**kwargs)
        self.exchanges = (self.exchanges or []) + results
        return results

    async def open_loop(self, **kwargs) -> list[Exchange]:
        results = await super().open_loop(**kwargs)
        self.exchanges = (self.exchanges or []) + results
        return results


class ProberClient:
    def __init__(self, base_url: str, db_url: str, max_concurrency: int) -> None:
        self.base_url = base_url
        self.db_url = db_url
        self.store = Store.open(db_url)
        self.target = TargetConfig(name="bench", protocol="openai", base_url=base_url, model=MODEL,
                                   max_concurrency=max_concurrency)
        self.settings = RunnerConfig(progress=False)
        self.probe = LatencyProbe()
        # One sample-writer process per conformance mode for the client's lifetime, as `prober run`
        # starts one per run: its start-up (imports, the SDK validators: about 1.8 s of CPU with
        # conformance on) is paid at the warm-up, not charged to each level's requests.
        self.writers: dict[bool, SampleWriterProcess] = {}

    def writer(self, conformance: bool) -> SampleWriterProcess:
        if conformance not in self.writers:
            self.writers[conformance] = SampleWriterProcess(self.db_url, self.settings.max_output_chars,
                                                            conformance=conformance)
        return self.writers[conformance]

    async def run_level(self, concurrency: int, count: int, conformance: bool, rate_rps: float | None = None,
                        seed: int = 0) -> dict:
        """A closed loop at `concurrency`, or with `rate_rps` an open loop: the latency probe's
        Poisson level (`count` requests on the schedule its `seed` gives)."""
        store, target, settings = self.store, self.target, self.settings
        run = Run(id=uuid.uuid4().hex[:12], suite="bench-ttft-overhead", started_at=utcnow(),
                  prober_version=prober.__version__, config_hash="bench", host=socket.gethostname(),
                  pid=os.getpid(), targets=[target.name],
                  notes={"concurrency": concurrency, "conformance": conformance})
        store.create_run(run)
        writer = self.writer(conformance)
        count_before = writer.count
        lag = LoopLagMonitor()
        lag.start()
        adapter = make_adapter(target, self.base_url, None)
        session = _RecordingSession(
            run_id=run.id, target=target, adapter=adapter, gate=TargetGate.for_target(target),
            probe_name=self.probe.name, budget=RunBudget(settings.budget), writer=writer, settings=settings,
            progress=RunProgress(Console(stderr=True), enabled=False), request_counter=itertools.count())
        if rate_rps is None:
            params = LatencyParams(levels=[concurrency], requests_per_level=count, warmup=0)
        else:
            params = LatencyParams(arrival="poisson", rates=[rate_rps], requests_per_level=count, warmup=0,
                                   seed=seed)

        writer_ticks = machine.tree_ticks([writer.pid]) if writer.pid else 0
        cpu0 = time.process_time()
        t0 = perf_counter_ns()
        await self.probe.run(session, params)
        wall = (perf_counter_ns() - t0) / 1e9
        cpu_loop = time.process_time() - cpu0
        t1 = perf_counter_ns()
        writer.flush()
        drain = (perf_counter_ns() - t1) / 1e9
        cpu_total = time.process_time() - cpu0
        writer_ticks = (machine.tree_ticks([writer.pid]) if writer.pid else 0) - writer_ticks

        await lag.stop()
        await adapter.aclose()
        lag_summary = lag.summary(t0, t0 + int(wall * 1e9))
        store.finish_run(run.id, "complete", utcnow(), loop_lag=lag.summary())
        stored = store.get_run(run.id)["sample_count"]
        unstored_at_end = writer.count - count_before - stored
        findings = collections.Counter(f for row in store.samples(run.id) for f in row["findings"] or [])

        exchanges = session.exchanges or []
        return {
            "ttft_ms": [ex.ttft_ms for ex in exchanges if ex.ok and ex.ttft_ms is not None],
            "errors": [f"{ex.error_type}: {ex.error_message}" for ex in exchanges if not ex.ok]
                      + ["no content chunk" for ex in exchanges if ex.ok and ex.ttft_ms is None],
            "wall_s": wall, "cpu_s": cpu_loop, "cpu_with_drain_s": cpu_total,
            "writer_cpu_s": machine.ticks_to_seconds(writer_ticks) if writer_ticks > 0 else None,
            "drain_s": drain, "unstored_at_end": unstored_at_end, "stored": stored,
            "loop_lag_p99_ms": lag_summary["p99_ms"], "findings": findings.most_common(3),
            "send_lag_ms": [ex.extra["send_lag_ms"] for ex in exchanges if "send_lag_ms" in ex.extra],
            "sent_ns": sorted(ex.start_ns for ex in exchanges),
        }

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
        self.store.close()


def client_process(control: Connection, base_url: str, db_url: str, max_concurrency: int) -> None:
    """Process entry: run each {"concurrency", "count", "conformance"} command, send the results."""
    machine.raise_fd_limit()
    client = ProberClient(base_url, db_url, max_concurrency)
    pauses = GcPauses()
    control.send("ready")
    try:
        while True:
            try:
                command = control.recv()
            except EOFError:
                return
            if command == "stop":
                return
            with quiet_garbage_collector():
                pauses.take()       # not the collection quiet_garbage_collector makes before the level
                result = event_loop.run(client.run_level(command.get("concurrency", 0), command["count"],
                                                      command["conformance"], command.get("rate_rps"),
                                                      command.get("seed", 0)))
            control.send({**result, **pauses.take()})
    finally:
        client.close()
