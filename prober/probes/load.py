"""The latency suite's open-loop levels and its capacity search (issue 13).

An open-loop level sends requests on a seeded schedule (prober/probes/arrivals.py) whatever the server is
doing, so queueing shows in TTFT. Each level also says whether the client kept its schedule:
`achieved_rate_rps`, the send lag (actual send minus due time) and the requests in flight; a level
the client could not keep is `client_limited`, and every metric of it carries that flag, so no SLO
or drift test ever judges it (prober/alerting/ skips flagged rows).

The capacity search (`arrival = "sweep"`) brackets the highest rate that meets the suite's
thresholds (TTFT p99, ITL p99, error rate) by doubling or halving from the first rate, then bisects
the bracket until it is narrower than `sweep_resolution` of its low end. Whether a step passed is
decided from its samples by `step_passes`, the same function `summarize` uses on the stored rows,
so a past run's capacity can be recomputed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prober.core import stats
from prober.core.records import ChatRequest, Exchange, SampleRow
from prober.probes.arrivals import ArrivalKind, schedule
from prober.probes.base import MetricCollector, ProbeContext
from prober.probes.sample_timings import request_itl_ms

if TYPE_CHECKING:
    from prober.probes.latency import LatencyParams

CLIENT_LIMITED = stats.CLIENT_LIMITED
# A level whose achieved send rate is below this share of its schedule's own rate was not kept.
MIN_ACHIEVED_SHARE = 0.95
# The rate the capacity search starts from when `rates` names none.
DEFAULT_SWEEP_START_RPS = 1.0


def level_labels(arrival: str, rate_rps: float) -> dict[str, Any]:
    return {"arrival": arrival, "rate_rps": round(rate_rps, 4)}


def level_schedule(params: LatencyParams, kind: ArrivalKind, rate_rps: float, phase: str,
                   count: int | None = None) -> list[float]:
    """The offsets of one level: the same seed, rate and phase give the same schedule."""
    seed = f"{params.seed}:{kind}:{round(rate_rps, 4)}:{phase}"
    if count is None and params.duration_s is not None:
        return schedule(kind, rate_rps, seed=seed, duration_s=params.duration_s, burstiness=params.burstiness)
    return schedule(kind, rate_rps, seed=seed, count=count or params.requests_per_level,
                    burstiness=params.burstiness)


async def run_level(ctx: ProbeContext, params: LatencyParams, kind: ArrivalKind, rate_rps: float,
                    make_request: Callable[[int], ChatRequest]) -> list[Exchange]:
    """One open-loop level: its warm-up (stored, phase=warmup), then the measured requests."""
    labels = level_labels(kind, rate_rps)
    if params.warmup:
        await ctx.open_loop(offsets_s=level_schedule(params, kind, rate_rps, "warmup", params.warmup),
                            make_request=make_request, max_concurrency=params.max_concurrency, case="sweep",
                            labels={**labels, "phase": "warmup"}, title=f"latency {kind} {rate_rps:g}/s warm-up")
    return await ctx.open_loop(offsets_s=level_schedule(params, kind, rate_rps, "measure"),
                               make_request=make_request, max_concurrency=params.max_concurrency, case="sweep",
                               labels={**labels, "phase": "measure"}, title=f"latency {kind} {rate_rps:g}/s")


async def run_sweep(ctx: ProbeContext, params: LatencyParams, make_request: Callable[[int], ChatRequest]) -> None:
    """The capacity search: bracket, then bisect; every step is an open-loop level."""
    kind = params.sweep_arrival
    passed: dict[float, bool] = {}

    async def step(rate: float) -> bool:
        rate = round(rate, 4)
        if rate not in passed:
            rows = [exchange_row(ex) for ex in await run_level(ctx, params, kind, rate, make_request)]
            passed[rate] = step_passes(rows, params)
        return passed[rate]

    rate = params.rates[0] if params.rates else DEFAULT_SWEEP_START_RPS
    if await step(rate):
        while (rate := rate * 2) <= params.sweep_max_rps and await step(rate):
            pass
    else:
        while (rate := rate / 2) >= params.sweep_min_rps and not await step(rate):
            pass
    while (bounds := capacity_bracket(passed)) is not None and bounds[1] is not None \
            and bounds[1] - bounds[0] > params.sweep_resolution * bounds[0]:
        await step((bounds[0] + bounds[1]) / 2)


def capacity_bracket(passed: dict[float, bool]) -> tuple[float, float | None] | None:
    """(the highest passing rate below every failing one, the lowest failing rate above it or None);
    None when no rate passed."""
    failing = [rate for rate, ok in passed.items() if not ok]
    lowest_fail = min(failing) if failing else None
    passing = [rate for rate, ok in passed.items() if ok and (lowest_fail is None or rate < lowest_fail)]
    if not passing:
        return None
    return max(passing), lowest_fail


def exchange_row(ex: Exchange) -> SampleRow:
    """The fields of a sample row that the level verdicts read, from an Exchange not yet stored."""
    offsets = ex.offsets_ms()
    return {"ttft_ms": offsets["ttft_ms"], "chunk_offsets_ms": offsets["chunk_offsets_ms"],
            "error_type": ex.error_type, "extra": ex.extra}


def step_passes(rows: Sequence[SampleRow], params: LatencyParams) -> bool:
    """Whether a sweep step met the thresholds: TTFT p99 and ITL p99 (the request as the unit)
    within theirs, the error share within `error_rate_threshold`, and the client kept the schedule
    (a step it did not keep says nothing about the server: it ends the search upwards)."""
    if not rows or client_verdict(rows, params).limited:
        return False

    ok = [r for r in rows if not r.get("error_type")]
    if (len(rows) - len(ok)) / len(rows) > params.error_rate_threshold:
        return False
    ttft_p99 = stats.percentile([t for r in ok if (t := r.get("ttft_ms")) is not None], 99)
    # The pooled gaps' p99, as the itl_p99_ms metric's value; its bootstrap interval is left out
    # here, since this runs on the event loop between two steps.
    itl_p99 = stats.percentile([gap for r in ok for gap in request_itl_ms(r)], 99)
    return (ttft_p99 is not None and ttft_p99 <= params.ttft_threshold_ms
            and (itl_p99 is None or itl_p99 <= params.itl_threshold_ms))


@dataclass(frozen=True)
class ClientVerdict:
    """Whether the client kept an open-loop level's schedule, and the evidence."""

    achieved_rate_rps: float | None
    scheduled_rate_rps: float | None
    send_lags_ms: list[float]
    inflight: list[int]
    capped: bool            # some request waited for max_concurrency: the cap, not the client, set the pace
    limited: bool


def client_verdict(rows: Sequence[SampleRow], params: LatencyParams) -> ClientVerdict:
    """The level's achieved send rate is judged against its own schedule's rate (a Poisson
    schedule of 60 requests is itself 13% off its nominal rate, one time in three); it does not
    count where the cap held requests back."""
    extras = [e for r in rows if (e := r.get("extra")) and "scheduled_offset_ms" in e]
    lags = [float(e["send_lag_ms"]) for e in extras if e.get("send_lag_ms") is not None]
    scheduled = sorted(float(e["scheduled_offset_ms"]) for e in extras)
    sent = sorted(float(e["scheduled_offset_ms"]) + float(e.get("concurrency_wait_ms", 0.0))
                  + float(e.get("send_lag_ms") or 0.0) for e in extras)
    capped = any(e.get("concurrency_wait_ms") for e in extras)
    achieved, target = _rate(sent), _rate(scheduled)
    lag_p99 = stats.percentile(lags, 99)
    limited = bool((lag_p99 is not None and lag_p99 > params.client_limited_send_lag_ms)
                   or (not capped and achieved is not None and target is not None
                       and achieved < MIN_ACHIEVED_SHARE * target))
    return ClientVerdict(achieved, target, lags, [int(e["inflight_at_send"]) for e in extras
                                                  if e.get("inflight_at_send") is not None], capped, limited)


def _rate(offsets_ms: list[float]) -> float | None:
    if len(offsets_ms) < 2 or offsets_ms[-1] <= offsets_ms[0]:
        return None
    return (len(offsets_ms) - 1) / ((offsets_ms[-1] - offsets_ms[0]) / 1000)


def add_client_metrics(collected: MetricCollector, rows: Sequence[SampleRow], labels: dict[str, Any],
                       params: LatencyParams) -> bool:
    """The client's own verdict on one open-loop level, as metrics; whether it was client_limited."""
    verdict = client_verdict(rows, params)
    n = len(rows)
    collected.add("achieved_rate_rps", verdict.achieved_rate_rps, labels, n, "requests/s")
    collected.add("scheduled_rate_rps", verdict.scheduled_rate_rps, labels, n, "requests/s")
    for q in (50, 99):
        collected.percentile(f"send_lag_p{q}_ms", verdict.send_lags_ms, q, labels, "ms")
    collected.percentile("inflight_p50", verdict.inflight, 50, labels, "requests")
    collected.add("inflight_max", max(verdict.inflight) if verdict.inflight else None, labels, n, "requests")
    collected.add("concurrency_capped", float(verdict.capped), labels, n, "bool")
    collected.add(CLIENT_LIMITED, float(verdict.limited), labels, n, "bool")
    return verdict.limited


def add_capacity(collected: MetricCollector, steps: dict[float, list[SampleRow]], params: LatencyParams) -> None:
    """`capacity_rps`: the bracket's low end, with the bracket as its interval (high end None when
    no step up to sweep_max_rps failed); flagged client_limited where the step that failed at the
    bracket's high end (or, nothing passing, the lowest step) failed because the client could not
    keep it: then the bracket is the client's, not the server's."""
    passed = {rate: step_passes(rows, params) for rate, rows in steps.items()}
    bounds = capacity_bracket(passed)
    deciding = (bounds[1] if bounds is not None else min(steps, default=None))
    limited = deciding is not None and client_verdict(steps[deciding], params).limited
    flags = [CLIENT_LIMITED] if limited else None
    if bounds is None:
        collected.add("capacity_rps", None, {}, len(steps), "requests/s", flags=flags)
        return
    collected.add("capacity_rps", bounds[0], {}, len(steps), "requests/s", bounds, flags)
