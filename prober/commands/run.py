"""`prober run`: run -> summarize (the runner) -> evaluate -> deliver (prober.alerting).

The runner stores and summarizes and returns; the targets that completed are then judged against
the SLO rules and their drift baselines, the alerts go through the outbox to the sinks, and the
exit code says what a cron job needs: 0 no alert fired (a broken SLO whose rule waits for `for`
consecutive runs is pending, not firing), 1 an alert fired, 3 the run could not complete (after
the other targets' alerts went out). Usage errors (2) are raised before the first request is sent.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from prober.alerting.alerts import Evaluation, evaluate_run, make_sinks
from prober.alerting.baseline import BaselineReads
from prober.alerting.drift import baseline_resets
from prober.alerting.slo_rules import RuleState, check_rules_known, rule_states, unmatched_warnings
from prober.commands.calibrate import CalibrationFailed, calibrate
from prober.core.config import BATCH_ENV, ProberConfig, TargetConfig, check_place_name
from prober.core.findings import applies, known_codes_seen, register_known
from prober.core.shards import parse_shard, shard_targets
from prober.core.sites import site_warning
from prober.run.runner import EXIT_OK, Runner, RunResult, prepare
from prober.run.store_access import open_store
from prober.store import Store
from prober.suites.loader import Suite

EXIT_ALERT = 1


@dataclass
class JudgedRun(RunResult):
    """A run and its verdicts."""

    alerts: Evaluation | None = None   # SLO and drift alerts of the targets that completed
    slo_states: dict[str, list[RuleState]] = field(default_factory=dict)   # per completed target
    warnings: list[str] = field(default_factory=list)   # rules that matched nothing, baseline resets


def run_and_judge(config: ProberConfig, console: Console, suite_name: str, target_names: list[str] | None = None,
                  overrides: dict[str, Any] | None = None, batch: str | None = None) -> JudgedRun:
    check_rules_known(config.slo, config.source)
    suite, targets, keys = prepare(config, suite_name, target_names, overrides)
    sinks = make_sinks(config)   # an unset URL or secret variable is a usage error, before any request
    site_note = site_warning(config, socket.gethostname())
    if site_note:
        console.print(f"warning: {site_note}", markup=False)   # now, and again among the run's last lines
    calibration_notes = _calibrate_first(config, console, suite)
    store = open_store(config.store.url, console)
    # The sample writer sets each target's known findings aside as notices (prober/core/findings.py).
    register_known({target.name: target.known for target in targets})
    try:
        ran = Runner(config, console, batch=batch).execute(store, suite, targets, keys)
        result = JudgedRun(**{f.name: getattr(ran, f.name) for f in dataclasses.fields(RunResult)})
        result.warnings += known_not_seen(store, result, targets)
        if result.status != "interrupted" and any(s == "complete" for s, _ in result.targets.values()):
            reads = BaselineReads()      # the drift tests' baseline reads, not read again for the resets
            result.alerts = evaluate_run(store, config, result.run_id, sinks, reads)
            if result.alerts.firing and result.exit_code == EXIT_OK:
                result.exit_code = EXIT_ALERT
            _judge_slos(config, store, suite, result, reads)
        result.warnings += calibration_notes + ([f"warning: {site_note}"] if site_note else [])
        return result
    finally:
        store.close()


def known_not_seen(store: Store, result: RunResult, targets: list[TargetConfig]) -> list[str]:
    """A line for each known finding that no sample of a completed target showed in this run: the
    server may have changed, and a stale entry would hide its return."""
    lines = []
    for target in targets:
        codes = [code for code in target.known if applies(code, target.protocol)]
        if not codes or result.targets.get(target.name, ("",))[0] != "complete":
            continue
        seen: set[str] = set()
        for row in store.samples(result.run_id, target=target.name):
            seen |= known_codes_seen((row.get("extra") or {}).get("notices") or [])
        lines += [f"known finding {code} not seen on target {target.name}: remove it from known if the "
                  f"server changed" for code in codes if code not in seen]
    return lines


def shard_selection(config: ProberConfig, target_names: list[str] | None, shard: str | None) -> list[str] | None:
    """The targets a `--shard I/N` process runs (prober/core/shards.py): its slice of the targets
    named, or of every configured target; the names unchanged without --shard. Every name is
    checked first, so an unknown target is an error on every shard, not only on its own."""
    index, count = parse_shard(shard) if shard is not None else (0, 1)
    names = target_names or list(config.targets)
    if shard is None or not names:   # no targets at all: the run says so (prepare)
        return target_names
    for name in names:
        config.target(name)
    return shard_targets(names, index, count)


def run_batch(given: str | None) -> str | None:
    """The batch of this run: --batch, else $PROBER_BATCH, else none."""
    if given is not None:
        return check_place_name(given, "--batch")
    from_env = os.environ.get(BATCH_ENV)
    return check_place_name(from_env, f"environment variable {BATCH_ENV}") if from_env else None


def _calibrate_first(config: ProberConfig, console: Console, suite: Suite) -> list[str]:
    """The suite's `calibrate` table, run before the suite (prober/commands/calibrate.py); a
    calibration that could not run is a warning, never a reason to skip the suite."""
    if suite.calibrate is None:
        return []
    try:
        calibration = calibrate(config, console, suite.calibrate)
    except CalibrationFailed as exc:
        return [f"calibration skipped: {exc}"]
    if calibration.run.status != "complete":
        return [f"calibration run {calibration.run.run_id} {calibration.run.status}: "
                + "; ".join(calibration.run.problems)]
    return []


def _judge_slos(config: ProberConfig, store: Store, suite: Suite, result: JudgedRun,
                reads: BaselineReads) -> None:
    """Each completed target's SLO rule states, and the warnings a user should see: rules that
    matched nothing, and suite entries whose drift baseline started again."""
    run = store.get_run(result.run_id)
    assert run is not None                     # written when the run started
    rows = store.metrics(result.run_id)
    probes = list(dict.fromkeys(entry.probe.name for entry in suite.entries))
    for name, (status, _) in result.targets.items():
        if status == "complete":
            result.slo_states[name] = rule_states(config.slo, run, name, probes, rows)
            result.warnings += unmatched_warnings(result.slo_states[name], result.run_id)
    if config.drift.enabled:
        result.warnings += baseline_resets(store, run, config.drift, reads)
        result.warnings += new_site_warnings(store, run, [name for name, (status, _) in result.targets.items()
                                                          if status == "complete"])


def new_site_warnings(store: Store, run: dict[str, Any], targets: list[str]) -> list[str]:
    """A line per target whose suite has no earlier complete run from this run's site while it has
    some from other sites: its drift baseline is empty because the site is new, which is what a
    site taken from a container's changing host name looks like."""
    here = store.completed_runs(run["suite"], targets, run["started_at"], 1, site=run["site"])
    lonely = [target for target in targets if not here[target]]
    if not lonely:
        return []
    anywhere = store.completed_runs(run["suite"], lonely, run["started_at"], 20)
    lines = []
    for target in lonely:
        others = sorted({str(r["site"]) for r in anywhere[target] if r.get("site") and r["site"] != run["site"]})
        if others:
            lines.append(f"warning: target {target}: no earlier {run['suite']} run from site {run['site']}, but "
                         f"runs from site {', '.join(others)}: drift has no baseline here; if this is the same "
                         f"prober, set PROBER_SITE to the site it ran from")
    return lines
