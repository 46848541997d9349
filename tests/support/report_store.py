"""A report store shared by the report, site and dashboard tests: real runs of several suites (run
and judged as `prober run` does, against the in-process emulator) plus hand-written history of a
target whose name, labels, outputs and errors are hostile, one failed night among them, and a
firing alert."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from rich.console import Console

from prober.alerting.alerts import evaluate_run
from prober.commands.run import run_and_judge
from prober.core.config import ProberConfig
from prober.core.records import Exchange, Metric, Run, Sample
from prober.store import Store

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(2)>'
EVIL_TARGET = 'evil"><img src=x onerror=alert(3)>'
NOW = dt.datetime.now(dt.UTC)


def report_config(tmp: Path) -> ProberConfig:
    scenario = tmp / "scenario.toml"
    scenario.write_text("output_tokens = 24\nslots = 64\nseed = 3\nfirst_token_delay_ms = 2\n"
                        "decode_tokens_per_s = 2000\n"
                        "[nondeterminism]\nflip_rate_per_extra_request = 0.05\nnear_ties = 8\n")
    return ProberConfig.model_validate({
        "targets": {"emulator": {"protocol": "anthropic", "model": "emulator-1",
                                 "emulator": {"scenario": str(scenario)}},
                    # frequency and presence penalties need the OpenAI protocol
                    "emulator-openai": {"protocol": "openai", "model": "emulator-1",
                                        "emulator": {"scenario": str(scenario)}}},
        "store": {"url": f"sqlite:///{tmp}/prober.db"},
        "runner": {"progress": False},
        "slo": [
            {"name": "ttft-generous", "metric": "ttft_p50_ms", "suite": "latency", "threshold": 60000},
            {"name": "no-divergence", "metric": "divergence_rate", "target": EVIL_TARGET,
             "labels": {"concurrency": 16}, "threshold": 0.1, "severity": "critical"},
        ],
    })


def exchange(text: str, started: dt.datetime, error: tuple[str, str] | None = None) -> Exchange:
    return Exchange(protocol="anthropic", url="http://emulator/v1/messages", request_body={"max_tokens": 8},
                    request_headers={}, started_at=started, start_ns=0, status=200, text=text,
                    error_type=error[0] if error else None, error_message=error[1] if error else None)


def write_hostile_history(store: Store) -> None:
    """Three nightly runs of a target whose name, labels, outputs and errors are hostile, with
    divergence history for the trend charts and penalty / schema-order metrics for their plots."""
    for day, rate in ((3, 0.05), (2, 0.1), (1, 0.5)):
        started = NOW - dt.timedelta(days=day)
        run_id = f"hostile{day}"
        store.create_run(Run(id=run_id, suite="nightly", started_at=started, prober_version="test",
                             config_hash="x", host="h", pid=1, targets=[EVIL_TARGET]))
        metrics = [Metric(run_id, EVIL_TARGET, "divergence", "divergence_rate", rate,
                          {"prompt": SCRIPT, "concurrency": c}, max(0.0, rate - 0.1), min(1.0, rate + 0.1), 32, "ratio")
                   for c in (1, 4, 16)]
        metrics += [Metric(run_id, EVIL_TARGET, "penalty", "corruption_rate", rate * pv if pv else 0.05,
                           {"mode": "json_object", "n_records": n, "penalty": "frequency_penalty" if pv else "none",
                            "penalty_value": pv, "temperature": 0.0}, None, None, 20, "ratio")
                    for pv in (None, 0.5, 1.0) for n in (5, 20)]
        metrics += [Metric(run_id, EVIL_TARGET, "schema_order", "accuracy", acc, {"variant": variant}, acc - 0.1,
                           acc + 0.1, 50, "ratio")
                    for variant, acc in (("answer_first", 0.6), ("reasoning_first", 0.8))]
        metrics.append(Metric(run_id, EVIL_TARGET, "schema_order", "mcnemar_p", 0.0123,
                              {"a": "answer_first", "b": "reasoning_first"}, n=50, unit="p"))
        store.write_metrics(metrics)
        with store.sample_writer() as writer:
            for i, output in enumerate(["the usual answer"] * 4 + [SCRIPT + " diverged", IMG]):
                writer.submit(Sample(run_id, EVIL_TARGET, "divergence", "story", {"prompt": "story", "concurrency": 16},
                                     exchange(output, started), request_index=i))
            writer.submit(Sample(run_id, EVIL_TARGET, "penalty", "records",
                                 {"mode": "json_object", "n_records": 5, "penalty": "frequency_penalty",
                                  "penalty_value": 1.0, "temperature": 0.0},
                                 exchange('{"records": [{"name": "<b>x</b>", ' + SCRIPT, started), request_index=10))
            writer.submit(Sample(run_id, EVIL_TARGET, "divergence", "story", {"prompt": "story", "concurrency": 16},
                                 exchange("", started, ("server_error", f"upstream said {IMG}")), request_index=11))
        store.finish_run(run_id, "complete", started + dt.timedelta(minutes=5))

# A night after the last complete one whose run failed: marked in the report, never plotted.
FAILED_RUN = "hostile0"


def write_failed_night(store: Store) -> None:
    started = NOW - dt.timedelta(hours=12)
    store.create_run(Run(id=FAILED_RUN, suite="nightly", started_at=started, prober_version="test",
                         config_hash="x", host="h", pid=1, targets=[EVIL_TARGET]))
    store.write_metrics([Metric(FAILED_RUN, EVIL_TARGET, "divergence", "divergence_rate", 0.9,
                                {"prompt": SCRIPT, "concurrency": c}, 0.8, 1.0, 32, "ratio") for c in (1, 4, 16)])
    store.finish_run(FAILED_RUN, "failed", started + dt.timedelta(minutes=1))


def build_report_store(tmp: Path) -> tuple[ProberConfig, Store]:
    """The store (in tmp) and the config that judged it."""
    config = report_config(tmp)
    console = Console(stderr=True)

    def run(suite, targets, params):   # judged as `prober run` judges, alerts and all
        return run_and_judge(config, console, suite, targets, params)

    results = [
        run("divergence", ["emulator"], {"levels": [1, 8], "requests_per_level": 8, "max_tokens": 24,
                                         "prompts": ["story", "review_json"]}),
        run("latency", ["emulator"], {"levels": [1, 2, 4], "requests_per_level": 6, "warmup": 1,
                                      "max_tokens": 16}),
        run("caching", ["emulator"], {"cases": ["repeat", "volatile"], "requests": 3, "max_tokens": 8}),
        run("caching", ["emulator"], {"cases": ["repeat"], "requests": 3, "max_tokens": 8}),
        run("penalty", ["emulator-openai"], {"modes": ["unconstrained"], "n_records": [3, 12],
                                             "temperatures": [0.0], "repeats": 3, "baseline_repeats": 2,
                                             "penalties": {"frequency_penalty": [0.5, 1.5]}, "concurrency": 4}),
        run("schema_order", ["emulator-openai"], {"limit": 16, "concurrency": 8}),
    ]
    assert all(r.status == "complete" for r in results), [r.problems for r in results]
    store = Store.open(config.store.url)
    write_hostile_history(store)
    for day in (3, 2, 1):   # the last hostile night breaks no-divergence: its alert fires
        evaluate_run(store, config, f"hostile{day}", sinks=[])
    write_failed_night(store)
    return config, store


def write_cli_config(tmp: Path, config: ProberConfig) -> Path:
    """The CLI's prober.toml in tmp: the store and the SLO rules of `config`."""
    lines = [f"[store]\nurl = {json.dumps(config.store.url)}\n"]
    for rule in config.slo:
        lines.append("[[slo]]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in rule.model_dump(exclude_none=True).items()
                  if not isinstance(value, dict)]
        for key, value in rule.model_dump(exclude_none=True).items():
            if isinstance(value, dict):
                lines.append(f"{key} = {{ {', '.join(f'{k} = {json.dumps(v)}' for k, v in value.items())} }}")
        lines.append("")
    path = tmp / "prober.toml"
    path.write_text("\n".join(lines))
    return path
