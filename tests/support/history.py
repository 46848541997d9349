"""Stored history for the alerting tests: runs with the metric rows and latency samples a probe
would have written, at chosen times, in a real (temporary SQLite) store."""

from __future__ import annotations

import datetime as dt
import os
import socket
from typing import Any

from prober.core.records import Exchange, Metric, Run, Sample
from prober.store import Store

T0 = dt.datetime(2026, 1, 1, 3, 0, tzinfo=dt.UTC)


def add_run(store: Store, run_id: str, night: int, metrics: list[dict[str, Any]], *, suite: str = "latency",
            target: str = "emu", status: str = "complete", params: dict[str, Any] | None = None,
            site: str = "") -> dict[str, Any]:
    """A finished run started `night` days after T0, with these metric rows (dicts of Metric fields;
    probe defaults to the suite's name). Each probe is one suite entry, `<suite>.<probe>`, recorded
    at probe version 1 with `params`, so runs with equal params are comparable baselines; `site`:
    where it probed from (default: this host's first label). Returns the stored run row."""
    started = T0 + dt.timedelta(days=night)
    store.create_run(Run(id=run_id, suite=suite, started_at=started, prober_version="test", config_hash="h",
                         host=socket.gethostname(), pid=os.getpid(), targets=[target], site=site))
    rows = [{"probe": suite, **m} for m in metrics]
    probes = list(dict.fromkeys(row["probe"] for row in rows)) or [suite]
    store.start_target(run_id, target, "h", [{"entry": f"{suite}.{probe}", "probe": probe, "probe_version": 1,
                                              "params": params or {}} for probe in probes])
    store.write_metrics([Metric(run_id=run_id, target=target, entry=f"{suite}.{row['probe']}", **row) for row in rows])
    store.finish_target(run_id, target, status)
    store.finish_run(run_id, status, started + dt.timedelta(minutes=5))
    return store.get_run(run_id)


def share(name: str, hits: int, n: int, **labels: Any) -> dict[str, Any]:
    """A proportion metric row as probes write them (value, Wilson interval, n, unit ratio)."""
    from prober.core import stats

    value, low, high = stats.proportion(hits, n)
    return {"name": name, "value": value, "ci_low": low, "ci_high": high, "n": n, "unit": "ratio", "labels": labels}


def latency_samples(store: Store, run_id: str, ttfts_ms: list[float], *, target: str = "emu",
                    probe: str = "latency", gap_ms: float = 5.0, chunks: int = 8, suite: str = "latency",
                    **labels: Any) -> None:
    """One measured streaming sample per TTFT value, with `chunks` content chunks `gap_ms` apart,
    from suite entry `<suite>.<probe>` (as add_run records it)."""
    start_ns = 1_000_000_000
    with store.sample_writer() as writer:
        for index, ttft in enumerate(ttfts_ms):
            first = start_ns + int(ttft * 1e6)
            chunk_ns = [first + int(i * gap_ms * 1e6) for i in range(chunks)]
            exchange = Exchange(protocol="anthropic", url="http://127.0.0.1:9/v1/messages", request_body={},
                                request_headers={}, started_at=T0, start_ns=start_ns, status=200, text="x" * chunks,
                                headers_ns=start_ns + 1_000_000, first_byte_ns=first, first_token_ns=first,
                                chunk_ns=chunk_ns, chunk_chars=[1] * chunks, end_ns=chunk_ns[-1] + 1_000_000)
            writer.submit(Sample(run_id=run_id, target=target, probe=probe, case="sweep",
                                 labels={**labels, "phase": "measure"}, exchange=exchange, request_index=index,
                                 entry=f"{suite}.{probe}"))


def nightly_template_store(url: str, levels: tuple[int, ...] = (1, 2, 4, 8, 16, 32),
                           requests_per_level: int = 40) -> None:
    """A complete nightly run of one target, as the latency probe stores it (TTFT and end-to-end
    percentiles per level, `requests_per_level` streamed samples per level), in the store at
    `url`: a template for bench/history_scale.py's `load_template`."""
    store = Store.open(url)
    try:
        rows = [{"probe": "latency", "name": name, "value": value * level, "ci_low": value * level * 0.9,
                 "ci_high": value * level * 1.1, "n": requests_per_level, "unit": "ms",
                 "labels": {"concurrency": level}}
                for level in levels for name, value in (("ttft_p50_ms", 20.0), ("ttft_p90_ms", 30.0),
                                                        ("ttft_p99_ms", 40.0), ("e2e_p50_ms", 300.0))]
        add_run(store, "template", 0, rows, suite="nightly", target="emu")
        for level in levels:
            latency_samples(store, "template", [20.0 + i % 7 for i in range(requests_per_level)], target="emu",
                            suite="nightly", concurrency=level)
    finally:
        store.close()
