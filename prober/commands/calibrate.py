"""`prober calibrate`: the client's own TTFT and ITL overhead on this machine, against the emulator.

The emulator runs in its own process (so that its work does not load the client's event loop)
with a fixed schedule (prober/probes/calibration.py); the runner drives it exactly as it drives a suite
(same session, adapter, transport, sample writer, conformance checking), and the run is stored
like any other, under the suite name `calibrate`, with the overhead metrics the emulator's ground
truth gives. Reports set the latest calibration of the same host beside latency figures.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console

from prober.core.config import ProberConfig, TargetConfig, Timeouts
from prober.core.errors import ConfigError, ProberError
from prober.core.records import Metric
from prober.core.tomlfile import validation_error
from prober.probes.calibration import CalibrationParams, CalibrationProbe, overhead_metrics
from prober.run.runner import Runner, RunResult
from prober.run.store_access import open_store
from prober.suites.loader import Suite, SuiteEntry
from prober.targets.transport import HTTPTransport, TransportError, split_url

SUITE = "calibrate"
TARGET = "calibration"
_START_TIMEOUT_S = 60.0
_LISTENING = re.compile(r"listening on (http://\S+)")


class CalibrationFailed(ProberError):
    """The calibration could not run (the emulator did not start or answer): exit code 3."""

    exit_code = 3


@dataclass
class Calibration:
    run: RunResult
    metrics: list[Metric]       # the run's own metrics and the overheads


def calibration_params(concurrency: str | None = None, rates: str | None = None,
                       settings: dict[str, Any] | None = None) -> CalibrationParams:
    """The probe's parameters: `settings` (keys of CalibrationParams), then the command line's
    comma-separated --concurrency and --rates over them; exit 2 on bad ones."""
    raw = dict(settings or {})
    for option, text, kind in (("concurrency", concurrency, int), ("rates", rates, float)):
        if text is not None:
            try:
                raw[option] = [kind(part) for part in text.split(",") if part.strip()]
            except ValueError:
                raise ConfigError(f"prober calibrate: --{option} {text!r}: expected comma-separated "
                                  f"{'integers' if kind is int else 'numbers'}") from None
    try:
        params = CalibrationParams.model_validate(raw)
    except ValidationError as exc:
        raise validation_error("prober calibrate", exc) from None
    if not params.concurrency and not params.rates:
        raise ConfigError("prober calibrate: give at least one --concurrency level or --rates value")
    return params


def calibrate(config: ProberConfig, console: Console, params: CalibrationParams,
              target_name: str | None = None) -> Calibration:
    """Start the emulator process, run the calibration through the runner, store the overheads."""
    template = config.target(target_name) if target_name else None
    with tempfile.TemporaryDirectory(prefix="prober-calibrate-") as workdir:
        scenario = Path(workdir) / "calibration.toml"
        scenario.write_text("".join(f"{key} = {value!r}\n" for key, value in params.scenario().items()))
        emulator, base_url = _start_emulator(scenario, Path(workdir) / "emulator.log")
        try:
            target = TargetConfig(
                name=TARGET, protocol=template.protocol if template else "openai", base_url=base_url,
                model=template.model if template else "calibration",
                timeouts=template.timeouts if template else Timeouts(),
                max_concurrency=max([*params.concurrency, params.requests_per_level]))
            suite = Suite(name=SUITE, description="the client's own overhead against the emulator",
                          path=scenario, entries=[SuiteEntry(suite=SUITE, probe=CalibrationProbe(), params=params,
                                                             id=f"{SUITE}.{CalibrationProbe.name}")])
            store = open_store(config.store.url, console)
            try:
                result = Runner(config, console).execute(store, suite, [target], {TARGET: None})
                metrics = list(result.metrics)
                if result.status == "complete":
                    truth = asyncio.run(_ground_truth(base_url))
                    overheads = [dataclasses.replace(metric, entry=suite.entries[0].id) for metric in overhead_metrics(
                        store.samples(result.run_id, target=TARGET), truth, params,
                        run_id=result.run_id, target=TARGET)]
                    store.write_metrics(overheads)
                    metrics += overheads
            finally:
                store.close()
        finally:
            _stop(emulator)
    return Calibration(run=result, metrics=metrics)


def _start_emulator(scenario: Path, log: Path) -> tuple[subprocess.Popen[str], str]:
    """`prober emulate` on a free port, in its own process; its base URL once it listens. Its
    stderr goes to `log`: a pipe nobody reads would stall it once full."""
    with log.open("w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "prober", "emulate", "--port", "0",
                                    "--scenario", str(scenario)],
                                   stdout=subprocess.PIPE, stderr=stderr, text=True)
    assert process.stdout is not None
    deadline = time.monotonic() + _START_TIMEOUT_S
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([process.stdout], [], [], left)
        if not ready:
            break
        line = process.stdout.readline()
        if not line:                    # the process ended before it listened
            break
        if match := _LISTENING.search(line):
            return process, match.group(1)
    _stop(process)
    said = log.read_text(errors="replace").strip().splitlines()
    reason = said[-1] if said else f"no address within {_START_TIMEOUT_S:g}s"
    raise CalibrationFailed(f"prober calibrate: the emulator did not start: {reason}")


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def _ground_truth(base_url: str) -> dict[str, dict[str, Any]]:
    """The emulator's records of what it did, by request id."""
    origin, _ = split_url(base_url)
    transport = HTTPTransport(origin, max_connections=1,
                              timeouts=Timeouts())
    try:
        response = await transport.send(transport.request_head("GET", "/_emulator/ground_truth", {}), b"",
                                        method="GET")
        try:
            body = await response.read()
        finally:
            await response.aclose()
    except TransportError as exc:
        raise CalibrationFailed(f"prober calibrate: could not read the emulator's ground truth: {exc}") from None
    finally:
        await transport.aclose()
    data = json.loads(body)
    records = data["requests"] if isinstance(data, dict) else data     # either layout the emulator has used
    return {record["request_id"]: record for record in records}
