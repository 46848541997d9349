"""Latency: TTFT, ITL, end-to-end time and throughput under a closed-loop concurrency sweep, or
under open-loop arrivals at given rates, or a capacity search (`arrival`; prober/probes/load.py).

Each level runs `warmup` requests (stored, labelled phase=warmup, not summarized), then
`requests_per_level` measured ones with `concurrency` requests in flight. Every prompt starts with
a nonce so that no prefix cache can flatter the numbers.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from prober.core import stats
from prober.core.declarations import Chart, MetricFamily
from prober.core.records import ChatRequest, Metric, SampleRow, labels_key
from prober.probes import load
from prober.probes.arrivals import ARRIVAL_KINDS, ArrivalKind, sorted_positive_rates
from prober.probes.base import ERROR_RATE, MetricCollector, Probe, ProbeContext
from prober.probes.prompts import filler_words, nonce
from prober.probes.sample_timings import request_itl_ms
from prober.probes.shapes import RequestShape, RequestShapeParams
from prober.probes.ttft_split import TTFT_SPLIT_METRICS, add_ttft_split


class LatencyParams(RequestShapeParams):
    levels: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16, 32])
    # 368 requests are the fewest that bound p99's distribution-free 95% interval; 400 leave room
    # for a few failed requests. Fewer are fine for p50 (6) and p90 (36): p99 is then flagged.
    requests_per_level: int = Field(400, ge=1)
    warmup: int = Field(2, ge=0, description="requests per level sent first and left out of the metrics")
    input_tokens: int = Field(128, ge=0, description="approximate prompt length in tokens")
    max_tokens: int = Field(64, ge=1)
    temperature: float = 0.0
    # Goodput: a request counts when it succeeded, its TTFT is within the first threshold and its
    # mean inter-token gap within the second (a per-request TPOT, as in DistServe's definition).
    ttft_threshold_ms: float = Field(2000.0, gt=0)
    itl_threshold_ms: float = Field(200.0, gt=0)
    # Open-loop load (prober/probes/load.py): "closed" runs `levels`; "constant", "poisson" and "gamma"
    # send `rates` (requests per second) on a seeded schedule; "sweep" searches for the capacity.
    # "trace": the requests of `trace_file` at its time-scaled arrival times (prober/probes/shapes.py).
    arrival: Literal["closed", "constant", "poisson", "gamma", "sweep", "trace"] = "closed"
    rates: list[float] = Field(default_factory=list, description="requests per second per open-loop level; "
                               "sweep: the first rate tried (default 1)")
    burstiness: float = Field(1.0, gt=0, description="gamma shape of the inter-arrival times: 1 is Poisson, "
                              "below 1 burstier")
    max_concurrency: int | None = Field(None, ge=1, description="open loops: requests in flight at most; "
                                        "the rest wait, and the wait is recorded")
    duration_s: float | None = Field(None, gt=0, description="open loops: seconds of arrivals per level, "
                                     "instead of requests_per_level")
    seed: int = Field(0, description="seed of the arrival schedules: the same seed, the same schedule")
    # 20 ms, as the event-loop lag that marks a saturated client (prober/run/looplag.py): on a shared
    # 2-core machine a quiet client's p99 over 60 requests reached 9-11 ms (a GIL hand-over to the
    # sample queue's feeder thread costs up to 5 ms), so a tighter default flags ordinary noise.
    client_limited_send_lag_ms: float = Field(20.0, gt=0, description="an open-loop level whose send lag "
                                              "p99 is above this is client_limited (never judged)")
    error_rate_threshold: float = Field(0.01, ge=0, le=1, description="sweep: the highest error share a "
                                        "rate may have and still count as met")
    sweep_arrival: ArrivalKind = "poisson"
    sweep_resolution: float = Field(0.1, gt=0, description="sweep: bisect until the bracket is narrower "
                                    "than this share of its low end")
    sweep_min_rps: float = Field(0.05, gt=0, description="sweep: halving stops below this rate")
    sweep_max_rps: float = Field(10_000.0, gt=0, description="sweep: doubling stops above this rate")

    @field_validator("levels")
    @classmethod
    def _positive_sorted(cls, levels: list[int]) -> list[int]:
        if not levels or any(level < 1 for level in levels):
            raise ValueError("levels must be a non-empty list of positive integers")
        return sorted(set(levels))

    @field_validator("rates")
    @classmethod
    def _positive_rates(cls, rates: list[float]) -> list[float]:
        return sorted_positive_rates(rates)

    @model_validator(mode="after")
    def _open_loop_needs_rates(self) -> LatencyParams:
        if self.arrival in ("constant", "poisson", "gamma") and not self.rates:
            raise ValueError(f"arrival = {self.arrival!r} needs rates (requests per second)")
        return self

    @model_validator(mode="after")
    def _trace_file_with_trace_arrival(self) -> LatencyParams:
        if (self.arrival == "trace") != (self.trace_file is not None):
            raise ValueError('arrival = "trace" and trace_file go together: give both or neither')
        return self


def output_tokens(row: SampleRow) -> int:
    """Output tokens as the wire reported them; the count of content chunks when it did not."""
    usage = row.get("usage") or {}
    for key in ("output_tokens", "completion_tokens"):
        if isinstance(count := usage.get(key), int):
            return count
    return len(row.get("chunk_offsets_ms") or [])


def reasoned_first(row: SampleRow) -> bool:
    """Whether the response streamed reasoning before its answer (its answer's first token came
    after its first token): only then does the answer's TTFT say something TTFT does not."""
    first, answer = row.get("ttft_ms"), row.get("ttft_answer_ms")
    return first is not None and answer is not None and answer > first


class LatencyProbe(Probe[LatencyParams]):
    name = "latency"
    version = 1
    metric_names = frozenset({
        *(f"ttft_p{q}_ms" for q in (50, 90, 99)), "headers_p50_ms",
        # where responses stream reasoning first: the answer's first token (reasoned_first)
        *(f"ttft_answer_p{q}_ms" for q in (50, 90, 99)), *(f"itl_p{q}_ms" for q in (50, 99)),
        *(f"e2e_p{q}_ms" for q in (50, 99)), "output_tps_per_request_p50", "output_tps_total", "error_rate",
        "goodput", "knee_concurrency", "service_tier_requests",
        # open-loop levels (prober/probes/load.py)
        "achieved_rate_rps", "scheduled_rate_rps", "send_lag_p50_ms", "send_lag_p99_ms", "inflight_p50",
        "inflight_max", "concurrency_capped", "client_limited", "capacity_rps", "knee_rate_rps",
        # prober/probes/ttft_split.py
        *TTFT_SPLIT_METRICS})
    label_params: ClassVar[dict[str, str]] = {"levels": "concurrency", "rates": "rate_rps"}
    Params = LatencyParams
    # A latency quantity is judged by its p50 at each concurrency level of the run.
    metric_families = (
        ERROR_RATE,
        MetricFamily("goodput", "share", bad_direction=-1, pool_every_label=True),
        MetricFamily("ttft_ms", "latency", bad_direction=1, metrics=("ttft_p50_ms",)),
        MetricFamily("e2e_ms", "latency", bad_direction=1, metrics=("e2e_p50_ms",)),
        MetricFamily("itl_ms", "latency", bad_direction=1, metrics=("itl_p50_ms",)),
        # A sweep's capacity at the entry's thresholds: a fall is the regression.
        MetricFamily("capacity_rps", "latency", bad_direction=-1),
    )
    pooled_labels = frozenset({"concurrency", "rate_rps"})

    async def run(self, ctx: ProbeContext, params: LatencyParams) -> None:
        shapes = params.shape_sampler(params.input_tokens, params.max_tokens)

        def make_request(i: int) -> ChatRequest:
            return shaped_request(shapes.shape(i), params.temperature)

        if params.arrival == "sweep":
            await load.run_sweep(ctx, params, make_request)
            return
        if params.arrival == "trace":
            await replay_trace(ctx, params)
            return
        if params.arrival != "closed":
            for rate in params.rates:
                await load.run_level(ctx, params, params.arrival, rate, make_request)
            return
        for level in params.levels:
            if params.warmup:
                await ctx.closed_loop(concurrency=min(level, params.warmup), count=params.warmup,
                                      make_request=make_request, case="sweep",
                                      labels={"concurrency": level, "phase": "warmup"},
                                      title=f"latency c={level} warm-up")
            await ctx.closed_loop(concurrency=level, count=params.requests_per_level,
                                  make_request=make_request, case="sweep",
                                  labels={"concurrency": level, "phase": "measure"},
                                  title=f"latency c={level}")

    def summarize(self, samples: Sequence[SampleRow], params: LatencyParams, *,
                  run_id: str, target: str) -> list[Metric]:
        # A level is its labels but the phase: {"concurrency": N} closed, {"arrival", "rate_rps"} open.
        by_level: dict[str, tuple[dict[str, Any], list[SampleRow]]] = {}
        for row in samples:
            labels = row.get("labels") or {}
            if row.get("probe") == self.name and labels.get("phase") == "measure" and row.get("final", True):
                level_of_row = {k: v for k, v in labels.items() if k != "phase"}
                by_level.setdefault(labels_key(level_of_row), (level_of_row, []))[1].append(row)

        collected = MetricCollector(run_id=run_id, target=target, probe=self.name)

        ttft_by_level: dict[float, list[float]] = {}
        ttft_by_rate: dict[float, list[float]] = {}
        open_steps: dict[float, list[SampleRow]] = {}
        for level_labels, rows in sorted(by_level.values(), key=lambda item: _level_order(item[0])):
            first_metric = len(collected.metrics)
            ok = [r for r in rows if not r.get("error_type")]
            n_all, n_ok = len(rows), len(ok)
            ttft = [t for r in ok if (t := r.get("ttft_ms")) is not None]
            headers = [t for r in ok if (t := r.get("headers_ms")) is not None]
            e2e = [t for r in ok if (t := r.get("end_ms")) is not None]
            itl_by_request = [request_itl_ms(r) for r in ok]
            for q in (50, 90, 99):
                collected.percentile(f"ttft_p{q}_ms", ttft, q, level_labels, "ms")
            if any(reasoned_first(r) for r in ok):
                answer = [t for r in ok if (t := r.get("ttft_answer_ms")) is not None]
                for q in (50, 90, 99):
                    collected.percentile(f"ttft_answer_p{q}_ms", answer, q, level_labels, "ms")
            collected.percentile("headers_p50_ms", headers, 50, level_labels, "ms")
            for q in (50, 99):
                # The gaps of one request are not independent: the request is the unit, n counts requests.
                collected.estimate(f"itl_p{q}_ms", stats.clustered_percentile_interval(itl_by_request, q),
                                   level_labels, "ms")
                collected.percentile(f"e2e_p{q}_ms", e2e, q, level_labels, "ms")

            per_request_tps = []
            for r in ok:
                tokens = output_tokens(r)
                first, end = r.get("ttft_ms"), r.get("end_ms")
                if tokens > 1 and first is not None and end:
                    decode_s = (end - first) / 1000
                    if decode_s > 0:
                        per_request_tps.append((tokens - 1) / decode_s)
            collected.percentile("output_tps_per_request_p50", per_request_tps, 50, level_labels, "tokens/s")
            collected.add("output_tps_total", _total_throughput(ok), level_labels, n_ok, "tokens/s")

            errors = n_all - n_ok
            share, low, high = stats.proportion(errors, n_all)
            collected.add("error_rate", share, level_labels, n_all, "ratio", (low, high))

            good = sum(1 for r in ok if _meets_thresholds(r, params))
            share, low, high = stats.proportion(good, n_all)
            collected.add("goodput", share, level_labels, n_all, "ratio", (low, high))
            # The tier that served each request: a night moved to another tier explains a latency
            # drift. Its own series per tier, so the level's other series keep one identity.
            tiers = Counter(r["service_tier"] for r in ok if r.get("service_tier"))
            for tier, count in sorted(tiers.items()):
                collected.add("service_tier_requests", count, {**level_labels, "service_tier": tier},
                              n_ok, "requests")
            add_ttft_split(collected, ok, level_labels)
            if "concurrency" in level_labels:
                ttft_by_level[int(level_labels["concurrency"])] = ttft
            else:
                open_steps[float(level_labels["rate_rps"])] = rows
                if load.add_client_metrics(collected, rows, level_labels, params):
                    for metric in collected.metrics[first_metric:]:
                        metric.flags = [*(metric.flags or []), load.CLIENT_LIMITED]
                else:      # only levels the client kept speak of the server's knee
                    ttft_by_rate[float(level_labels["rate_rps"])] = ttft

        if params.arrival == "closed":
            # The knee: the lowest level whose TTFT p50 is more than twice the first level's.
            knee = stats.knee_interval(ttft_by_level)
            collected.add("knee_concurrency", knee.value, {}, knee.n, "requests", (knee.low, knee.high))
        elif params.arrival == "sweep":
            load.add_capacity(collected, open_steps, params)
        elif params.arrival in ARRIVAL_KINDS and len(ttft_by_rate) > 1:
            knee = stats.knee_interval(ttft_by_rate)
            collected.add("knee_rate_rps", knee.value, {"arrival": params.arrival}, knee.n, "requests/s",
                          (knee.low, knee.high))
        return collected.metrics

    def charts(self, latest: Sequence[dict[str, Any]]) -> list[Chart]:
        # TTFT and ITL apart (queueing shows in the first, batching in the second), against
        # concurrency for closed-loop levels and against the offered rate for open-loop ones.
        present = {key for row in latest for key in (row.get("labels") or {})}
        split = any(row.get("name") in TTFT_SPLIT_METRICS for row in latest)
        charts = []
        for x, against in (("concurrency", "concurrency"), ("rate_rps", "rate")):
            if x not in present:
                continue
            x_label = "requests per second" if x == "rate_rps" else None
            charts += [Chart("versus", f"TTFT percentiles against {against}", "ms",
                             ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms"), x=x, x_label=x_label),
                       Chart("versus", f"Inter-token latency percentiles against {against}", "ms",
                             ("itl_p50_ms", "itl_p99_ms"), x=x, x_label=x_label)]
            if split:
                charts.append(Chart("versus", f"TTFT p50 split into queueing and server prefill against {against}",
                                    "ms", ("ttft_p50_ms", "ttft_queue_p50_ms", "prefill_p50_ms"), x=x,
                                    x_label=x_label))
        return charts


def _level_order(labels: dict[str, Any]) -> tuple[str, float]:
    return str(labels.get("arrival", "")), float(labels.get("concurrency", labels.get("rate_rps", 0)))


async def replay_trace(ctx: ProbeContext, params: LatencyParams) -> None:
    """arrival = "trace": every request of the trace (those due within `duration_s` when it is
    set) at its time-scaled offset, with the trace's own lengths; one open-loop level labelled
    with the trace's mean rate, so that the client's verdict and the charts treat it like any.
    The `warmup` requests (the trace's first ones, stored as phase=warmup) go first."""
    trace = params.trace() or []
    if params.duration_s is not None:
        trace = [request for request in trace if request.offset_s < params.duration_s]
    span = trace[-1].offset_s - trace[0].offset_s if trace else 0.0
    rate = (len(trace) - 1) / span if span > 0 else 0.0
    labels = {**load.level_labels("trace", rate), "phase": "measure"}

    def make_request(i: int) -> ChatRequest:
        request = trace[i]
        return shaped_request(RequestShape(request.input_tokens, request.output_tokens, source=request.source),
                              params.temperature)

    if params.warmup:        # opens the connections the replay's first requests would wait for
        await ctx.closed_loop(concurrency=params.warmup, count=min(params.warmup, len(trace)),
                              make_request=make_request, case="trace", labels={**labels, "phase": "warmup"},
                              title="latency trace warm-up")
    await ctx.open_loop(offsets_s=[request.offset_s for request in trace], make_request=make_request,
                        max_concurrency=params.max_concurrency, case="trace", labels=labels,
                        title=f"latency trace x{params.time_scale:g} ({len(trace)} requests)")


# Built at send time under open-loop load: each length's filler once, not once per request.
_filler = functools.lru_cache(maxsize=4096)(filler_words)


def shaped_request(shape: RequestShape, temperature: float) -> ChatRequest:
    """A streamed request of `shape`, its lengths kept with the sample (extra.shape)."""
    text = shape.prompt if shape.prompt is not None else f"{_filler(shape.input_tokens or 0)}\n\nWrite a short story."
    return ChatRequest(
        messages=[{"role": "user", "content": f"[{nonce()}] {text}"}],
        # An answer of 0 tokens cannot be asked for: a dataset's 0 becomes the shortest answer.
        max_tokens=max(1, shape.output_tokens),
        stream=True,
        sampling={"temperature": temperature},
        stored_extra={"shape": shape.as_extra()},
    )


def _meets_thresholds(row: SampleRow, params: LatencyParams) -> bool:
    ttft = row.get("ttft_ms")
    if ttft is None or ttft > params.ttft_threshold_ms:
        return False
    gaps = request_itl_ms(row)
    return not gaps or sum(gaps) / len(gaps) <= params.itl_threshold_ms


def _total_throughput(rows: list[SampleRow]) -> float | None:
    """Output tokens of all successful requests over the level's wall-clock span."""
    spans = [(start, end) for r in rows if (start := r.get("started_at")) and (end := r.get("end_ms"))]
    if not spans:
        return None
    first = min(start for start, _ in spans)
    last = max(start.timestamp() + end / 1000 for start, end in spans)
    duration = last - first.timestamp()
    if duration <= 0:
        return None
    return sum(output_tokens(r) for r in rows) / duration
