"""Run a suite: expand it over targets, sample each, store everything, summarize into metrics.

Exit codes (DESIGN.md): 0 all held; 1 an SLO broke or drift was detected (reports/alerts.py,
after a complete run); 3 the run could not complete (endpoint unreachable, error rate over the ceiling, budget
exhausted, interrupted). Configuration errors (2) are raised before anything is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import os
import signal
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

import prober
from prober.budget import BudgetExhausted, RunBudget
from prober.config import ProberConfig, TargetConfig
from prober.errors import ConfigError
from prober.looplag import LoopLagMonitor
from prober.progress import RunProgress
from prober.records import Metric, Run, utcnow
from prober.redact import register_config
from prober.session import TargetGate, TargetSession
from prober.sink import SampleSink
from prober.targets import make_adapter
from prober.transport import unreachable_reason
from reports.alerts import Evaluation, evaluate_run, make_sinks
from store import Store
from suites.loader import Suite, load_suite

EXIT_OK, EXIT_ALERT, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3


@dataclass
class RunResult:
    run_id: str
    status: str
    exit_code: int
    metrics: list[Metric] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    samples: int = 0
    alerts: Evaluation | None = None   # SLO and drift alerts of a complete run


def prepare(config: ProberConfig, suite_name: str, target_names: list[str] | None,
            overrides: dict[str, Any] | None = None) -> tuple[Suite, list[TargetConfig], dict[str, str | None]]:
    """Everything that can fail as a usage error, checked before the first request is sent."""
    suite = load_suite(suite_name, config.suite_paths, overrides)
    names = target_names or list(config.targets)
    if not names:
        raise ConfigError(f"{config.source}: no targets configured")
    targets = [config.target(name) for name in names]
    keys = {t.name: t.api_key(config.source) for t in targets}
    for t in targets:
        t.env_headers(config.source)   # an unset variable is a usage error now, not mid-run
    register_config(config)            # every secret it names is masked in what the run stores or prints
    return suite, targets, keys


@contextlib.contextmanager
def quiet_garbage_collector():
    """Keep full collections from pausing the client mid-measurement.

    A full collection walks every object left from start-up (about 100k) and paused the event loop
    for 60-90 ms in the benchmark, landing on whichever first tokens were due. Requests leave no
    reference cycles worth collecting, so: freeze what exists, collect rarely, restore afterwards.
    """
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 1000)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


class Runner:
    def __init__(self, config: ProberConfig, console: Console | None = None) -> None:
        self.config = config
        self.console = console or Console(stderr=True)

    def run(self, suite_name: str, target_names: list[str] | None = None,
            overrides: dict[str, Any] | None = None) -> RunResult:
        suite, targets, keys = prepare(self.config, suite_name, target_names, overrides)
        sinks = make_sinks(self.config)   # an unset URL or secret variable is a usage error, before any request
        store = Store.open(self.config.store.url)
        try:
            for stale in store.mark_stale_runs_interrupted():
                self.console.print(f"run {stale} was left running by a process that is gone: marked interrupted",
                                   markup=False)
            with quiet_garbage_collector():
                result = asyncio.run(self._main(store, suite, targets, keys))
            if result.status == "complete":
                result.alerts = evaluate_run(store, self.config, result.run_id, sinks)
                if result.alerts.firing and result.exit_code == EXIT_OK:
                    result.exit_code = EXIT_ALERT
            return result
        finally:
            store.close()

    async def _main(self, store: Store, suite: Suite, targets: list[TargetConfig],
                    keys: dict[str, str | None]) -> RunResult:
        run = Run(id=uuid.uuid4().hex[:12], suite=suite.name, started_at=utcnow(),
                  prober_version=prober.__version__, config_hash=self.config.hash(),
                  host=socket.gethostname(), pid=os.getpid(), targets=[t.name for t in targets])
        store.create_run(run)
        result = RunResult(run_id=run.id, status="running", exit_code=EXIT_OK)
        self.console.print(f"run {run.id}: suite {suite.name} against {', '.join(run.targets)}", markup=False)

        main_task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        interrupted = False

        def on_signal() -> None:
            nonlocal interrupted
            interrupted = True
            if main_task is not None:
                main_task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)

        lag = LoopLagMonitor()
        lag.start()
        sink = SampleSink(self.config.store.url, self.config.runner.max_output_chars,
                          conformance=self.config.runner.conformance == "all")
        budget = RunBudget(self.config.runner.budget)
        counter = itertools.count()
        sessions: list[TargetSession] = []
        crashed: Exception | None = None
        try:
            with RunProgress(self.console, self.config.runner.progress) as progress:
                for target in targets:
                    await self._run_target(run, suite, target, keys[target.name], budget, sink, progress,
                                           counter, sessions, result)
        except asyncio.CancelledError:
            if not interrupted:
                raise
            result.problems.append("interrupted by a signal")
            result.status = "interrupted"
        except BudgetExhausted as exc:
            result.problems.append(f"budget exhausted: {exc}")
            result.status = "failed"
        except Exception as exc:
            # A bug in prober, not in the endpoint: keep the samples, mark the run failed, and let
            # the traceback through so that it gets reported.
            crashed = exc
            result.problems.append(f"internal error: {type(exc).__name__}: {exc}")
            result.status = "failed"
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            await lag.stop()
            sink.flush()

        result.samples = sink.count
        if result.status != "interrupted" and crashed is None:
            result.metrics = self._summarize(store, run.id, suite, targets, sessions, lag)
            store.write_metrics(result.metrics)
            self._check_error_ceiling(store, run.id, result)
        if result.status == "running":
            result.status = "failed" if result.problems else "complete"
        if result.problems:
            result.exit_code = EXIT_INCOMPLETE
        sink.close()
        store.finish_run(run.id, result.status, utcnow(), loop_lag=lag.summary(),
                         notes={"problems": result.problems, "attempts": budget.requests,
                                "tokens": budget.tokens})
        if crashed is not None:
            raise crashed
        return result

    async def _run_target(self, run: Run, suite: Suite, target: TargetConfig, api_key: str | None,
                          budget: RunBudget, sink: SampleSink, progress: RunProgress, counter: itertools.count,
                          sessions: list[TargetSession], result: RunResult) -> None:
        emulator = None
        if target.is_emulator:
            from prober.emulator import Emulator, load_scenario
            emulator = Emulator(load_scenario(target.emulator.scenario))
            await emulator.start(host="127.0.0.1", port=0)
            base_url = emulator.base_url
        else:
            base_url = target.base_url
            problem = await unreachable_reason(base_url, target.timeouts.connect)
            if problem:
                hint = " (start it with `prober local start`)" if target.name == "local" else ""
                result.problems.append(f"target {target.name}: {problem}{hint}")
                self.console.print(f"target {target.name}: {problem}{hint}", markup=False)
                return
        adapter = make_adapter(target, base_url, api_key)
        gate = TargetGate.for_target(target)
        try:
            for entry in suite.entries:
                session = TargetSession(run_id=run.id, target=target, adapter=adapter, gate=gate,
                                        probe_name=entry.probe.name, budget=budget, sink=sink,
                                        settings=self.config.runner, progress=progress, request_counter=counter)
                sessions.append(session)
                await entry.probe.run(session, entry.params)
        finally:
            await adapter.aclose()
            if emulator is not None:
                await emulator.stop()

    def _summarize(self, store: Store, run_id: str, suite: Suite, targets: list[TargetConfig],
                   sessions: list[TargetSession], lag: LoopLagMonitor) -> list[Metric]:
        metrics: list[Metric] = []
        for target in targets:
            for entry in suite.entries:
                rows = [r for r in store.samples(run_id, probe=entry.probe.name) if r["target"] == target.name]
                if rows:
                    metrics.extend(entry.probe.summarize(rows, entry.params, run_id=run_id, target=target.name))
        # Client honesty: the event-loop lag over each measured loop, reported beside its results.
        for session in sessions:
            for window in session.windows:
                if window.labels.get("phase", "measure") != "measure":
                    continue
                labels = {k: v for k, v in window.labels.items() if k != "phase"}
                summary = lag.summary(window.start_ns, window.end_ns)
                metrics.append(Metric(run_id=run_id, target=session.target.name, probe=session.probe_name,
                                      name="client_loop_lag_p99_ms", value=summary["p99_ms"], labels=labels,
                                      n=summary["n"], unit="ms"))
                metrics.append(Metric(run_id=run_id, target=session.target.name, probe=session.probe_name,
                                      name="client_saturated", value=float(summary["saturated"]),
                                      labels=labels, n=summary["n"], unit="bool"))
                if summary["saturated"]:
                    self.console.print(f"warning: {session.target.name} {session.probe_name} {labels}: the "
                                       f"client's event loop lagged (p99 {summary['p99_ms']:.1f} ms); latency "
                                       f"figures there are inflated by the client", markup=False)
        return metrics

    def _check_error_ceiling(self, store: Store, run_id: str, result: RunResult) -> None:
        rows = [r for r in store.samples(run_id) if r.get("final", True)]
        if not rows:
            return
        failed = sum(1 for r in rows if r.get("error_type"))
        share = failed / len(rows)
        if share > self.config.runner.error_rate_ceiling:
            result.problems.append(f"error rate {share:.0%} ({failed}/{len(rows)} requests) is over the "
                                   f"ceiling of {self.config.runner.error_rate_ceiling:.0%}")
