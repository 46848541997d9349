"""Run a suite: expand it over targets, sample each, store everything, summarize into metrics.

Each target runs and fails on its own: a target that cannot complete (unreachable, error rate over
the ceiling, budget exhausted) is recorded as failed with its reason, and every other target is
still summarized. The runner returns its results and knows nothing of alerts: the command layer
(prober/commands/run.py) judges the targets that completed (SLO rules, drift) and delivers.

Exit codes (docs/operations.md): 0 the run completed; 3 some target could not complete, or the run was
interrupted. Configuration errors (2) are raised before anything is sent; 1 (an alert fired: an SLO
rule reached its `for`, or drift was found) is the command layer's.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

import prober
from prober.core import stats
from prober.core.collector import quiet_garbage_collector
from prober.core.config import ProberConfig, TargetConfig
from prober.core.errors import ConfigError
from prober.core.records import Metric, Run, label_text, labels_key, new_run_id, utcnow
from prober.core.redact import register_config
from prober.run import event_loop
from prober.run.budget import BudgetExhausted, RunBudget
from prober.run.lease import lease_until
from prober.run.looplag import LoopLagMonitor
from prober.run.progress import RunProgress
from prober.run.provenance import entry_records, target_config_hash
from prober.run.run_resources import RunResources
from prober.run.run_status import EXIT_INCOMPLETE, EXIT_OK, RunStop, reconcile
from prober.run.sample_writer import SampleWriterProcess
from prober.run.session import TargetGate, TargetSession
from prober.run.store_access import open_store
from prober.store import Store
from prober.suites.loader import Suite, load_suite
from prober.targets import make_adapter
from prober.targets.transport import unreachable_reason

__all__ = ["EXIT_INCOMPLETE", "EXIT_OK", "RunResult", "Runner", "prepare"]
# How an emulator target serves a probe, by what of the timing its metrics depend on (Probe.timing):
# (times faster than the scenario, tokens a streamed chunk). "overlap" keeps requests long enough
# (about 70 ms for 64 tokens) to share batches as at full timing (10x did not: divergence at
# concurrency 8 fell from 0.60 to 0.51); "none" is CPU-bound, a chunk per token left the
# penalty suite at 4 minutes (at the scenario's 200 tokens/s, one request at a time: an hour).
# Answers are the same at any pace.
EMULATOR_PACE = {"measured": (1.0, 1), "overlap": (5.0, 1), "none": (100.0, 8)}


@dataclass
class RunResult:
    run_id: str
    status: str
    exit_code: int
    metrics: list[Metric] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    samples: int = 0
    # Per target, in run order: (status, reason); reason says why a target did not complete.
    targets: dict[str, tuple[str, str | None]] = field(default_factory=dict)


def prepare(config: ProberConfig, suite_name: str, target_names: list[str] | None,
            overrides: dict[str, Any] | None = None) -> tuple[Suite, list[TargetConfig], dict[str, str | None]]:
    """Everything about the suite and targets that can fail as a usage error, checked before the
    first request is sent."""
    suite = load_suite(suite_name, config.suite_paths, overrides)
    names = target_names or list(config.targets)
    if not names:
        raise ConfigError(f"{config.source}: no targets configured")
    targets = [config.target(name) for name in names]
    keys = {t.name: t.api_key(config.source) for t in targets}
    for t in targets:
        t.env_headers(config.source)   # an unset variable is a usage error now, not mid-run
    config.run_site(socket.gethostname())   # so is a bad PROBER_SITE
    register_config(config)            # every secret it names is masked in what the run stores or prints
    return suite, targets, keys


class Runner:
    def __init__(self, config: ProberConfig, console: Console | None = None, batch: str | None = None) -> None:
        self.config = config
        self.console = console or Console(stderr=True)
        self.batch = batch   # the scheduled night this run belongs to (`prober run --batch`)

    def run(self, suite_name: str, target_names: list[str] | None = None,
            overrides: dict[str, Any] | None = None) -> RunResult:
        """Prepare, open the store, execute, close: a run nobody judges (`prober run` judges its
        runs in prober/commands/run.py)."""
        suite, targets, keys = prepare(self.config, suite_name, target_names, overrides)
        store = open_store(self.config.store.url, self.console)
        try:
            return self.execute(store, suite, targets, keys)
        finally:
            store.close()

    def execute(self, store: Store, suite: Suite, targets: list[TargetConfig],
                keys: dict[str, str | None]) -> RunResult:
        """Run a prepared suite (see `prepare`) into an open store."""
        with quiet_garbage_collector():
            return event_loop.run(self._main(store, suite, targets, keys))

    async def _main(self, store: Store, suite: Suite, targets: list[TargetConfig],
                    keys: dict[str, str | None]) -> RunResult:
        run = self._new_run(suite, targets)
        store.create_run(run)
        # From here the run is in the store as `running`: everything after, starting its resources
        # included, is inside the block that finishes it, so that no failure leaves it `running`
        # until its lease expires.
        resources = RunResources(store, run.id, self.config, self.console)
        budget = RunBudget(self.config.runner.budget)
        sessions: list[TargetSession] = []
        ended: dict[str, tuple[str, str | None]] = {}
        crashed: Exception | None = None
        crash: str | None = None
        try:
            self._announce(run, suite)
            resources.start([(t.name, target_config_hash(t)) for t in targets], entry_records(suite))
            await self._sample_targets(store, run, suite, targets, keys, budget, resources, sessions, ended)
        except asyncio.CancelledError:
            if not resources.interrupted:
                raise
        except Exception as exc:
            # A bug in prober, not in the endpoint, or a resource of the run that could not start:
            # keep the samples, mark the run failed, and let the exception through so that it gets reported.
            crashed = exc
            crash = f"{'internal error' if resources.started else 'could not start'}: {type(exc).__name__}: {exc}"
        finally:
            storage = await resources.stop_sampling()
        stop = RunStop(interrupted=resources.interrupted and crash is None, crash=crash, storage=storage)
        result = RunResult(run_id=run.id, status="running", exit_code=EXIT_OK,
                           samples=self._samples_stored(store, run.id, resources, stop))
        if stop.summarizes:
            try:
                self._check_error_ceilings(store, run.id, ended)
                # A failed target's partial samples are summarized too, for `prober show`; only the
                # targets that completed are judged (prober/alerting/alerts.py, prober/alerting/drift.py).
                result.metrics = self._summarize(store, run.id, suite, targets, sessions, resources.lag)
                store.write_metrics(result.metrics)
            except Exception as exc:
                # Summarizing failed (a bug, the store refusing the metrics): the run still finishes, failed.
                crashed, result.metrics = exc, []
                stop = RunStop(crash=f"internal error: {type(exc).__name__}: {exc}")
        decided = reconcile([t.name for t in targets], ended, stop)
        result.status, result.exit_code, result.problems, result.targets = (
            decided.status, decided.exit_code, decided.problems, decided.targets)
        resources.close()
        self._finish(store, run.id, result, resources, budget, lost_samples=storage is not None)
        if crashed is not None:
            raise crashed
        return result

    def _new_run(self, suite: Suite, targets: list[TargetConfig]) -> Run:
        host = socket.gethostname()
        return Run(id=new_run_id(), suite=suite.name, started_at=utcnow(),
                   prober_version=prober.__version__, config_hash=self.config.hash(),
                   host=host, pid=os.getpid(), targets=[t.name for t in targets],
                   lease_expires_at=lease_until(self.config.runner.lease_seconds),
                   site=self.config.run_site(host), batch=self.batch,
                   notes={"event_loop": event_loop.describe(asyncio.get_running_loop())})

    def _announce(self, run: Run, suite: Suite) -> None:
        batch = f", batch {run.batch}" if run.batch else ""
        self.console.print(f"run {run.id}: suite {suite.name} against {', '.join(run.targets)} from site {run.site}"
                           f"{batch}", markup=False)

    async def _sample_targets(self, store: Store, run: Run, suite: Suite, targets: list[TargetConfig],
                              keys: dict[str, str | None], budget: RunBudget, resources: RunResources,
                              sessions: list[TargetSession], ended: dict[str, tuple[str, str | None]]) -> None:
        """Each target in turn; `ended` gets each one's ("complete" | "failed", reason) as it ends."""
        assert resources.writer is not None     # started by resources.start
        counter = itertools.count()
        with RunProgress(self.console, self.config.runner.progress) as progress:
            progress.start_suite(suite.name, len(targets) * len(suite.entries))
            for target in targets:
                reason = await self._run_target(store, run, suite, target, keys[target.name], budget,
                                                resources.writer, progress, counter, sessions)
                ended[target.name] = ("failed", reason) if reason else ("complete", None)
            progress.finish_suite()

    @staticmethod
    def _samples_stored(store: Store, run_id: str, resources: RunResources, stop: RunStop) -> int:
        """The samples handed to the writer; when storing failed, those that reached the store."""
        handed = resources.writer.count if resources.writer is not None else 0
        if stop.storage is not None:
            with contextlib.suppress(Exception):
                if (stored := store.get_run(run_id)) is not None:
                    return int(stored["sample_count"])
        return handed

    def _finish(self, store: Store, run_id: str, result: RunResult, resources: RunResources, budget: RunBudget,
                *, lost_samples: bool) -> None:
        """Store the run's final status, notes and targets."""
        try:
            store.finish_run(run_id, result.status, utcnow(), loop_lag=resources.lag.summary(),
                             notes={"problems": result.problems, "attempts": budget.requests,
                                    "tokens": budget.tokens},
                             targets=result.targets)
        except Exception as exc:
            if not lost_samples:
                raise
            # The store that lost samples (a full disk) refused this too: the run stays `running`
            # until its lease expires, and then any command marks it interrupted. What was stored stays.
            result.problems.append(f"its final status could not be stored either ({type(exc).__name__}); it "
                                   f"will be marked interrupted when its lease expires")

    async def _run_target(self, store: Store, run: Run, suite: Suite, target: TargetConfig, api_key: str | None,
                          budget: RunBudget, writer: SampleWriterProcess, progress: RunProgress,
                          counter: itertools.count[int], sessions: list[TargetSession]) -> str | None:
        """Run every suite entry against one target; the reason it could not complete, or None."""
        emulator = None
        if target.emulator is not None:
            from prober.emulator import Emulator, load_scenario
            emulator = Emulator(load_scenario(target.emulator.scenario))
            await emulator.start(host="127.0.0.1", port=0)
            base_url = emulator.base_url
        else:
            assert target.base_url is not None     # required where there is no emulator (TargetConfig)
            base_url = target.base_url
            problem = await unreachable_reason(base_url, target.timeouts.connect)
            if problem:
                hint = " (start it with `prober local start`)" if target.name == "local" else ""
                self.console.print(f"target {target.name}: {problem}{hint}", markup=False)
                return f"{problem}{hint}"
        adapter = make_adapter(target, base_url, api_key)
        gate = TargetGate.for_target(target)
        try:
            for entry in suite.entries:
                session = TargetSession(run_id=run.id, target=target, adapter=adapter, gate=gate,
                                        probe_name=entry.probe.name, budget=budget, writer=writer,
                                        settings=self.config.runner, progress=progress, request_counter=counter,
                                        entry=entry.id)
                sessions.append(session)
                if emulator is not None:
                    emulator.pace, emulator.tokens_per_chunk = EMULATOR_PACE[entry.probe.timing]
                await entry.probe.run(session, entry.params)
                progress.entry_done()
        except BudgetExhausted as exc:
            return f"budget exhausted: {exc}"
        finally:
            await adapter.aclose()
            if emulator is not None:
                await emulator.stop()
        return None

    def _summarize(self, store: Store, run_id: str, suite: Suite, targets: list[TargetConfig],
                   sessions: list[TargetSession], lag: LoopLagMonitor) -> list[Metric]:
        """Metrics of the given targets, each stamped with its suite entry."""
        metrics: list[Metric] = []
        for target in targets:
            for entry in suite.entries:
                rows = store.samples(run_id, target=target.name, entry=entry.id)
                if rows:
                    summary = entry.probe.summarize(rows, entry.params, run_id=run_id, target=target.name)
                    metrics.extend(dataclasses.replace(metric, entry=entry.id) for metric in summary)
        # Client honesty: an open-loop level whose schedule the client did not keep (its metrics
        # flagged by the probe) is said so at once, not only in `prober show`.
        limited = {(m.target, m.probe, labels_key(m.labels)): m.labels for m in metrics
                   if stats.CLIENT_LIMITED in (m.flags or [])}
        for (target_name, probe_name, _), labels in limited.items():
            self.console.print(f"warning: {target_name} {probe_name} {label_text(labels)}: the client did not keep "
                               f"this open-loop level's schedule; its figures are flagged {stats.CLIENT_LIMITED} "
                               f"and never judged", markup=False)
        names = {target.name for target in targets}
        # Client honesty: the event-loop lag over each measured loop, reported beside its results.
        for session in (s for s in sessions if s.target.name in names):
            for window in session.windows:
                if window.labels.get("phase", "measure") != "measure":
                    continue
                labels = {k: v for k, v in window.labels.items() if k != "phase"}
                lag_summary = lag.summary(window.start_ns, window.end_ns)
                metrics.append(Metric(run_id=run_id, target=session.target.name, probe=session.probe_name,
                                      name="client_loop_lag_p99_ms", value=lag_summary["p99_ms"], labels=labels,
                                      n=lag_summary["n"], unit="ms", entry=session.entry))
                metrics.append(Metric(run_id=run_id, target=session.target.name, probe=session.probe_name,
                                      name="client_saturated", value=float(lag_summary["saturated"]),
                                      labels=labels, n=lag_summary["n"], unit="bool", entry=session.entry))
                if lag_summary["saturated"]:
                    self.console.print(f"warning: {session.target.name} {session.probe_name} {label_text(labels)}: the "
                                       f"client's event loop lagged (p99 {lag_summary['p99_ms']:.1f} ms); latency "
                                       f"figures there are inflated by the client", markup=False)
        return metrics

    def _check_error_ceilings(self, store: Store, run_id: str, ended: dict[str, tuple[str, str | None]]) -> None:
        """A completed target whose final error share is over the ceiling fails, with the share and
        its most common error (auth failures end here: every request comes back 401)."""
        ceiling = self.config.runner.error_rate_ceiling
        for name, (status, _) in list(ended.items()):
            rows = [r for r in store.samples(run_id, target=name) if r.get("final", True)]
            if status != "complete" or not rows:
                continue
            failed = [r for r in rows if r.get("error_type")]
            share = len(failed) / len(rows)
            if share > ceiling:
                common = collections.Counter((r["error_type"], r.get("http_status")) for r in failed)
                (error_type, http_status), _ = common.most_common(1)[0]
                status_text = f", HTTP {http_status}" if http_status else ""
                ended[name] = ("failed", f"error rate {share:.0%} ({len(failed)}/{len(rows)} requests) "
                                                  f"is over the ceiling of {ceiling:.0%}; most common error: "
                                                  f"{error_type}{status_text}")
