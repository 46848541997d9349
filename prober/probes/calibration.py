"""Calibration: how much of a TTFT and an inter-token gap is the client's own doing, on this machine.

`prober calibrate` (prober/commands/calibrate.py) runs this probe against an emulator in its own
process whose schedule is fixed: the first content token `first_token_ms` after the request arrived,
then one token every `gap_ms`, no prefill, slots for every request. The probe sends through the
same runner, session, adapter and transport as any suite, closed loop at each concurrency level
and open loop at each rate. The emulator says when it really wrote each first token (its ground
truth, prober/emulator/ground_truth.py); `overhead_metrics` sets the two side by side:

    ttft_overhead = the client's TTFT - the emulator's TTFT, per request (matched by request id)
    itl_overhead  = each inter-token gap the client measured - gap_ms

The first is exact (the emulator's own lateness is in both terms and cancels); the second counts
the emulator's lateness between tokens as overhead too, so it is an upper bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field, field_validator

from prober.core import stats
from prober.core.records import ChatRequest, Metric, SampleRow
from prober.probes.arrivals import schedule, sorted_positive_rates
from prober.probes.base import ERROR_RATE, MetricCollector, Probe, ProbeContext, ProbeParams
from prober.probes.prompts import nonce
from prober.probes.sample_timings import request_itl_ms

OVERHEAD_METRICS = tuple(f"{kind}_overhead_p{q}_ms" for kind in ("ttft", "itl") for q in (50, 99))


class CalibrationParams(ProbeParams):
    concurrency: list[int] = Field(default_factory=lambda: [1, 64, 256])
    rates: list[float] = Field(default_factory=list, description="open-loop levels, requests per second")
    requests_per_level: int = Field(256, ge=1)
    first_token_ms: float = Field(100.0, gt=0, description="the emulator's fixed time to the first token")
    gap_ms: float = Field(10.0, gt=0, description="the emulator's fixed gap between tokens")
    tokens: int = Field(10, ge=2, description="content tokens per response")

    @field_validator("concurrency")
    @classmethod
    def _positive_levels(cls, levels: list[int]) -> list[int]:
        if any(level < 1 for level in levels):
            raise ValueError("concurrency levels must be positive integers")
        return sorted(set(levels))

    @field_validator("rates")
    @classmethod
    def _positive_rates(cls, rates: list[float]) -> list[float]:
        return sorted_positive_rates(rates)

    def scenario(self) -> dict[str, Any]:
        """The emulator scenario (TOML keys) with exactly this schedule and no queueing."""
        busiest = max(self.concurrency, default=1)
        return {"first_token_delay_ms": self.first_token_ms, "prefill_ms_per_token": 0.0,
                "decode_tokens_per_s": 1000.0 / self.gap_ms, "output_tokens": self.tokens,
                "slots": max(busiest, self.requests_per_level, 1)}


class CalibrationProbe(Probe[CalibrationParams]):
    name = "calibration"
    version = 1
    metric_names = frozenset({*OVERHEAD_METRICS, "error_rate"})
    Params = CalibrationParams
    metric_families = (ERROR_RATE,)

    async def run(self, ctx: ProbeContext, params: CalibrationParams) -> None:
        def make_request(_: int) -> ChatRequest:
            return ChatRequest(messages=[{"role": "user", "content": f"[{nonce()}] calibrate"}],
                               max_tokens=params.tokens, stream=True, sampling={"temperature": 0.0})

        for level in params.concurrency:
            await ctx.closed_loop(concurrency=level, count=params.requests_per_level, make_request=make_request,
                                  case="calibrate", labels={"concurrency": level},
                                  title=f"calibration c={level}")
        for rate in params.rates:
            offsets = schedule("constant", rate, seed=0, count=params.requests_per_level)
            await ctx.open_loop(offsets_s=offsets, make_request=make_request, max_concurrency=None,
                                case="calibrate", labels={"rate_rps": rate}, title=f"calibration {rate:g} rps")

    def summarize(self, samples: Sequence[SampleRow], params: CalibrationParams, *,
                  run_id: str, target: str) -> list[Metric]:
        """The error rate per level; the overheads need the emulator's ground truth, which only the
        calibrate command has (`overhead_metrics`)."""
        collected = MetricCollector(run_id=run_id, target=target, probe=self.name)
        for labels, rows in _by_level(samples).items():
            failed = sum(1 for row in rows if row.get("error_type"))
            collected.share("error_rate", failed, len(rows), dict(labels))
        return collected.metrics


def _by_level(samples: Sequence[SampleRow]) -> dict[tuple[tuple[str, Any], ...], list[SampleRow]]:
    levels: dict[tuple[tuple[str, Any], ...], list[SampleRow]] = {}
    for row in samples:
        if row.get("probe") == CalibrationProbe.name and row.get("final", True):
            levels.setdefault(tuple(sorted((row.get("labels") or {}).items())), []).append(row)
    return levels


def overhead_metrics(samples: Sequence[SampleRow], truth: Mapping[str, Mapping[str, Any]],
                     params: CalibrationParams, *, run_id: str, target: str) -> list[Metric]:
    """TTFT and ITL overhead (p50, p99, each with its interval) per level, from the stored samples
    and the emulator's ground truth records keyed by request id. A request the emulator has no
    first token for (or that failed) is left out; n says how many counted."""
    collected = MetricCollector(run_id=run_id, target=target, probe=CalibrationProbe.name)
    for labels, rows in _by_level(samples).items():
        ttft_overhead: list[float] = []
        gap_overhead: list[list[float]] = []
        for row in rows:
            record = truth.get(row.get("request_id") or "")
            client_ttft = row.get("ttft_ms")
            if row.get("error_type") or record is None or client_ttft is None or record.get("ttft_ms") is None:
                continue
            ttft_overhead.append(client_ttft - record["ttft_ms"])
            gap_overhead.append([gap - params.gap_ms for gap in request_itl_ms(row)])
        for q in (50, 99):
            collected.percentile(f"ttft_overhead_p{q}_ms", ttft_overhead, q, dict(labels), "ms")
            collected.estimate(f"itl_overhead_p{q}_ms", stats.clustered_percentile_interval(gap_overhead, q),
                               dict(labels), "ms")
    return collected.metrics
