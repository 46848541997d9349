"""TTFT split into the wait before the server started on a request and the prefill itself.

Where the server reports its own prefill time with each response, a request's TTFT (measured by
the client) is prefill plus everything before it: the wait for a slot (queueing, the part that
grows under load), the transport and the client's own overhead. llama-server reports it as
`timings.prompt_ms` on the last chunk (from the slot's start to the end of the prompt: the queue
is left out), which the OpenAI adapter keeps in the sample's `extra["timings"]`. vLLM and SGLang
report no per-request timings in the response, only in their Prometheus histograms
(vllm:request_queue_time_seconds, ...; a response field is proposed in vllm-project/vllm#36383 and
#40076, both open), so their samples get no split and no split metrics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from prober.core.records import SampleRow
from prober.probes.base import MetricCollector

TTFT_SPLIT_METRICS = frozenset(f"{name}_p{q}_ms" for name in ("ttft_queue", "prefill") for q in (50, 99))


def server_prefill_ms(row: SampleRow) -> float | None:
    """The prefill the server reported for this request (llama-server's timings.prompt_ms), or None."""
    timings = (row.get("extra") or {}).get("timings")
    if not isinstance(timings, dict):
        return None
    value = timings.get("prompt_ms")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def ttft_split(row: SampleRow) -> tuple[float, float] | None:
    """(queue_ms, prefill_ms): TTFT minus the server's prefill, and that prefill; None without both."""
    ttft, prefill = row.get("ttft_ms"), server_prefill_ms(row)
    if ttft is None or prefill is None:
        return None
    return ttft - prefill, prefill


def add_ttft_split(collected: MetricCollector, ok_rows: Sequence[SampleRow], labels: dict[str, Any]) -> None:
    """ttft_queue_p50/p99_ms and prefill_p50/p99_ms of one level's successful requests, each
    with its distribution-free interval; nothing when no request carried the server's timings."""
    split = [pair for row in ok_rows if (pair := ttft_split(row)) is not None]
    if not split:
        return
    for q in (50, 99):
        collected.percentile(f"ttft_queue_p{q}_ms", [queue for queue, _ in split], q, labels, "ms")
        collected.percentile(f"prefill_p{q}_ms", [prefill for _, prefill in split], q, labels, "ms")
