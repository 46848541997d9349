"""Prompt caching: does the cache hit, what kills it, how far back it looks, the smallest prefix it
keeps, what fan-out does to it, which change invalidates which tier, and what it all costs.

Cases (each sample's `case`; metrics carry `case` as a label):

- repeat: `requests` (K) requests share a frozen prefix (tools + system, breakpoint on the last
  system block; OpenAI caches automatically, with `prompt_cache_key` when configured) and differ
  only in the last user message, sent one after another.
- volatile: the same with a timestamp at one of VOLATILE_POSITIONS.
- lookback (Anthropic protocol): a conversation grows by n tool_use/tool_result blocks between a
  writer and a reader request; one breakpoint at the end, then extra ones every
  `lookback_breakpoint_every` blocks.
- min_prefix: bisect the prefix length for the smallest one that gets cached; compare with the
  documented minimum for the model (`documented_min_prefix`).
- fanout: `fanout_requests` (N) requests on one fresh prefix fired at once, and the same N fired
  after the first one's first token.
- tiers (Anthropic protocol): one change at a time against a base request with a breakpoint at the
  end of each tier (tools, system, messages).
- ttl (off by default: it waits past the TTL): write, read, wait, and check the entry is gone.
- usage: conformance of every caching sample's usage fields, and the cross-check of reported hits
  against TTFT.

What counts as a hit: cache-read tokens >= `hit_min_tokens`. The hosted APIs read either nothing or
at least 1,024 tokens, so the threshold changes nothing there; self-hosted servers with automatic
prefix caching report the few tokens of a shared chat-template header on every request, which are
not a cached prefix.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from prober.core import stats
from prober.core.config import Pricing
from prober.core.declarations import Chart, MetricFamily
from prober.core.records import ChatRequest, Exchange, Metric, SampleRow
from prober.probes import caching_requests as rq
from prober.probes.base import MetricCollector, Probe, ProbeContext, ProbeParams
from prober.probes.prompts import nonce

CASES = ("repeat", "volatile", "lookback", "min_prefix", "fanout", "tiers", "ttl")
DEFAULT_CASES = ("repeat", "volatile", "lookback", "min_prefix", "fanout", "tiers")
ANTHROPIC_ONLY = ("lookback", "tiers")

# Documented minimum cacheable prefix per model (tokens). A key matches the model id itself or the
# id followed by "-..." (a dated id); the longest matching key wins. Anthropic rows from the
# Anthropic-authored prompt-caching guide; third-party pages disagree on
# the newest models (Opus 4.8 1,024, Opus 4.7 2,048, Fable 5 512), which is why this is measured.
# OpenAI: automatic caching from 1,024 tokens. The emulator keeps its own copy on purpose
# (prober/emulator/scenario.py): it stands for the server, this for what the docs promise, and a
# scenario can make the two disagree, which is what min_prefix exists to catch.
DOCUMENTED_MIN_PREFIX: dict[str, int] = {
    "claude-opus-4-8": 4096, "claude-opus-4-7": 4096, "claude-opus-4-6": 4096, "claude-opus-4-5": 4096,
    "claude-haiku-4-5": 4096,
    "claude-fable-5": 2048, "claude-sonnet-4-6": 2048, "claude-3-5-haiku": 2048, "claude-3-haiku": 2048,
    "claude-sonnet-4-5": 1024, "claude-opus-4-1": 1024, "claude-sonnet-4": 1024, "claude-opus-4": 1024,
    "claude-3-7-sonnet": 1024,
    "gpt": 1024, "chatgpt": 1024, "o1": 1024, "o3": 1024, "o4": 1024,
}

TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
FALLBACK_PREFIX_TOKENS = 2048        # prefix for models missing from the table
READS_PREVIOUS_SHARE = 0.9           # lookback: a reader "reads the previous entry" when it reads
                                     # at least this share of the writer's whole prompt
CACHED_SHARE = 0.5                   # min_prefix: a prefix "got cached" when its reader read at
                                     # least this share of it
TOTAL_TOLERANCE = (16, 0.05)         # usage: totals of one sequence agree within max(16, 5%)


class CachingParams(ProbeParams):
    cases: list[str] = Field(default_factory=lambda: list(DEFAULT_CASES),
                             description=f"which cases run, of {', '.join(CASES)}")
    prefix_tokens: int | None = Field(None, ge=32, description="frozen prefix (tools + system) in tokens; "
                                      "unset: 1.5x the documented minimum for the model, else 2048")
    requests: int = Field(8, ge=2, description="K: requests per repeat sequence and per volatile position")
    ttl: Literal["5m", "1h"] = Field("5m", description="breakpoint TTL; picks the write multiplier")
    max_tokens: int = Field(16, ge=1, description="output tokens per request")
    prompt_cache_key: str | None = Field(None, description="OpenAI: sent as prompt_cache_key")
    hit_min_tokens: int = Field(64, ge=1, description="cache-read tokens that make a request a hit")
    volatile_positions: list[str] = Field(default_factory=lambda: list(rq.VOLATILE_POSITIONS))
    lookback_blocks: list[int] = Field(default_factory=lambda: [4, 10, 16, 20, 22, 30],
                                       description="n: blocks added between writer and reader (even)")
    lookback_breakpoint_every: int = Field(15, ge=2, description="extra breakpoint every this many blocks")
    min_prefix_low: int = Field(128, ge=1, description="bisection: shortest prefix tried (tokens)")
    min_prefix_high: int | None = Field(None, ge=2, description="bisection: longest prefix tried; unset: "
                                        "twice the documented minimum, else 4096")
    min_prefix_resolution: int = Field(128, ge=1, description="bisection stops at this bracket width")
    documented_min_prefix: dict[str, int] = Field(default_factory=lambda: dict(DOCUMENTED_MIN_PREFIX),
                                                  description="model -> documented minimum; given "
                                                  "entries are merged over the defaults")
    fanout_requests: int = Field(8, ge=2, description="N: requests per fan-out pattern")
    ttl_wait_s: float | None = Field(None, gt=0, description="ttl case: seconds to wait; unset: TTL + 30 s")
    timing_faster_ratio: float = Field(0.8, gt=0, le=1, description="a hit should have TTFT below this "
                                       "share of a cold request's")

    @field_validator("cases")
    @classmethod
    def _known_cases(cls, cases: list[str]) -> list[str]:
        unknown = [c for c in cases if c not in CASES]
        if unknown:
            raise ValueError(f"unknown case {unknown[0]!r} (cases: {', '.join(CASES)})")
        return cases

    @field_validator("volatile_positions")
    @classmethod
    def _known_positions(cls, positions: list[str]) -> list[str]:
        unknown = [p for p in positions if p not in rq.VOLATILE_POSITIONS]
        if unknown:
            raise ValueError(f"unknown position {unknown[0]!r} (positions: {', '.join(rq.VOLATILE_POSITIONS)})")
        return positions

    @field_validator("documented_min_prefix", mode="before")
    @classmethod
    def _over_defaults(cls, value: object) -> object:
        return {**DOCUMENTED_MIN_PREFIX, **value} if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _lookback_fits(self) -> CachingParams:
        for n in self.lookback_blocks:
            if n < 2 or n % 2:
                raise ValueError(f"lookback_blocks: {n} is not an even number >= 2 (blocks come in "
                                 f"tool_use/tool_result pairs)")
            if len(rq.breakpoint_positions(n, self.lookback_breakpoint_every)) > 4:
                raise ValueError(f"lookback_blocks: {n} blocks with a breakpoint every "
                                 f"{self.lookback_breakpoint_every} needs more than 4 breakpoints")
        if self.min_prefix_high is not None and self.min_prefix_high <= self.min_prefix_low:
            raise ValueError("min_prefix_high must be above min_prefix_low")
        return self


def documented_minimum(model: str, table: dict[str, int]) -> int | None:
    matches = [key for key in table if model == key or model.startswith(key + "-")]
    return table[max(matches, key=len)] if matches else None


# --- reading usage (pure) --------------------------------------------------------------------------

def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _details(usage: dict[str, Any]) -> dict[str, Any]:
    details = usage.get("prompt_tokens_details")
    return details if isinstance(details, dict) else {}


def reported_read(row: SampleRow) -> int | None:
    """Cache-read tokens exactly as reported; None when the field is absent."""
    usage = row.get("usage") or {}
    if row.get("protocol") == "anthropic":
        return _int(usage.get("cache_read_input_tokens"))
    return _int(_details(usage).get("cached_tokens"))


def reported_write(row: SampleRow) -> int | None:
    """Cache-write tokens as reported (Anthropic cache_creation_input_tokens, OpenAI
    prompt_tokens_details.cache_write_tokens); None when absent."""
    usage = row.get("usage") or {}
    if row.get("protocol") == "anthropic":
        return _int(usage.get("cache_creation_input_tokens"))
    return _int(_details(usage).get("cache_write_tokens"))


def prompt_total(row: SampleRow) -> int | None:
    """All prompt tokens. Anthropic: input_tokens (the uncached remainder) + creation + read, an
    absent cache field adding nothing; OpenAI: prompt_tokens, which includes cached_tokens."""
    usage = row.get("usage") or {}
    if row.get("protocol") == "anthropic":
        uncached = _int(usage.get("input_tokens"))
        if uncached is None:
            return None
        return uncached + (reported_write(row) or 0) + (reported_read(row) or 0)
    return _int(usage.get("prompt_tokens"))


class CacheReads:
    """Cache-read tokens of a target's samples. When the endpoint reports the field on some
    samples, an absent field elsewhere is a read of 0 (vLLM and SGLang leave `cached_tokens` out
    when it is 0); when it never reports it, every read is unknown: "cache reporting unavailable",
    not zero hits."""

    def __init__(self, rows: Sequence[SampleRow]) -> None:
        self.available = any(reported_read(r) is not None for r in rows if not r.get("error_type"))

    def __call__(self, row: SampleRow) -> int | None:
        if row.get("error_type") or not row.get("usage"):
            return None
        read = reported_read(row)
        if read is None and self.available:
            return 0
        return read


# usage.cache_creation's per-TTL write counts (Anthropic), by the TTL each prices.
_TTL_WRITE_FIELDS = {"5m": "ephemeral_5m_input_tokens", "1h": "ephemeral_1h_input_tokens"}


def ttl_write_cost(row: SampleRow, write: int, write_multiplier: float,
                   ttl_rates: dict[str, float] | None) -> float:
    """The price of `write` cache-write tokens in input-token units. Where usage.cache_creation
    splits them by TTL, each part at its TTL's rate (5-minute and 1-hour writes are billed
    differently, and one request can make both); whatever the split does not account for, and
    every write where there is no split, at the configured TTL's `write_multiplier`."""
    split = (row.get("usage") or {}).get("cache_creation")
    if not ttl_rates or not isinstance(split, dict):
        return write * write_multiplier
    cost = 0.0
    rest = write
    for ttl, key in _TTL_WRITE_FIELDS.items():
        tokens = _int(split.get(key))
        if tokens and ttl in ttl_rates:
            tokens = min(tokens, rest)
            cost += tokens * ttl_rates[ttl]
            rest -= tokens
    return cost + rest * write_multiplier


def cost_multiplier(rows: Sequence[SampleRow], reads: CacheReads, write_multiplier: float,
                    read_multiplier: float, ttl_rates: dict[str, float] | None = None
                    ) -> tuple[float | None, str]:
    """Prompt cost of one sequence (rows in send order) with caching over its cost without:
    uncached tokens at 1x, writes at `write_multiplier` (or at their own TTL's rate in `ttl_rates`
    where usage splits them: ttl_write_cost), reads at `read_multiplier`. Output tokens cost the
    same either way and are left out.

    Absent write field (llama-server's /v1/messages has no cache_creation_input_tokens): unknown,
    not zero. Anthropic protocol: assume hosted-API billing, where a request writes what a later
    request of the sequence reads beyond its own read. OpenAI protocol: assume writes are free, as
    before GPT-5.6 (newer models report cache_write_tokens). Returns (value, "reported" | "assumed").
    """
    cost = baseline = 0.0
    assumed = False
    known: list[tuple[SampleRow, int, int]] = []
    for row in rows:
        total, read = prompt_total(row), reads(row)
        if total is not None and read is not None:
            known.append((row, total, read))
    for i, (row, total, read) in enumerate(known):
        write = reported_write(row)
        if write is None:
            assumed = True
            later = max((r for _, _, r in known[i + 1:]), default=0)
            write = max(0, min(total, later) - read) if row.get("protocol") == "anthropic" else 0
            write_cost = write * write_multiplier
        else:
            write_cost = ttl_write_cost(row, write, write_multiplier, ttl_rates)
        cost += (total - read - write) + write_cost + read * read_multiplier
        baseline += total
    if baseline <= 0:
        return None, "assumed" if assumed else "reported"
    return cost / baseline, "assumed" if assumed else "reported"


def classify_tier(read: int | None, boundaries: dict[str, float], hit_min: int) -> str | None:
    """The deepest tier a read covers: the boundary nearest to the read ("none" below a hit)."""
    if read is None:
        return None
    if read < hit_min:
        return "none"
    return min(("tools", "system", "messages"), key=lambda tier: abs(read - boundaries[tier]))


# --- the probe -------------------------------------------------------------------------------------

class CachingProbe(Probe[CachingParams]):
    name = "caching"
    version = 1
    metric_names = frozenset({
        "skipped", "hit_rate", "read_fraction", "cached_tokens_p50", "ttft_first_ms", "ttft_hit_p50_ms",
        "ttft_hit_vs_first", "cost_multiplier", "read_tokens", "reads_previous", "lookback_limit",
        "lookback_limit_found", "extra_breakpoints_recover", "min_prefix_tokens", "largest_uncached_tokens",
        "documented_min_prefix_tokens", "min_prefix_agrees", "hits", "followers_after_first_token",
        "stagger_wait_ms", "expected_read_tokens", "expected_tier_level", "observed_tier_level", "tier_match",
        "tier_match_rate", "hit_before_wait", "hit_after_wait", "waited_s", "cache_reporting_available",
        "cache_read_reported", "cache_write_reported", "usage_consistent", "ttft_warm_vs_cold",
        "timing_mismatch"})
    Params = CachingParams
    metric_families = (
        MetricFamily("hit_rate", "share", bad_direction=-1),
        MetricFamily("tier_match_rate", "share", bad_direction=-1),
        MetricFamily("cache_read_reported", "share", bad_direction=-1),
        MetricFamily("cache_write_reported", "share", bad_direction=-1),
        MetricFamily("usage_consistent", "share", bad_direction=-1),
    )
    pooled_labels = frozenset({"position"})

    async def run(self, ctx: ProbeContext, params: CachingParams) -> None:
        session = _Session(ctx, params)
        for case in params.cases:
            if case in ANTHROPIC_ONLY and ctx.target.protocol != "anthropic":
                continue     # summarize reports it as skipped
            with ctx.progress_task(f"caching {case}", session.most_requests(case)):
                await getattr(session, case)()

    def summarize(self, samples: Sequence[SampleRow], params: CachingParams, *,
                  run_id: str, target: str) -> list[Metric]:
        rows = [r for r in samples if r.get("probe") == self.name and r.get("final", True)]
        return _Summary(rows, params, run_id=run_id, target=target, probe=self.name).metrics()

    def charts(self, latest: Sequence[dict[str, Any]]) -> list[Chart]:
        return [Chart("trend", "Cache hit rate over time (Wilson 95%)", "hit rate", ("hit_rate",)),
                Chart("trend", "Prompt cost with caching over without, over time", "cost multiplier",
                      ("cost_multiplier",))]


class _Session:
    """Sends one run's caching cases through a ProbeContext."""

    def __init__(self, ctx: ProbeContext, params: CachingParams) -> None:
        self.ctx = ctx
        self.p = params
        self.protocol = ctx.target.protocol
        self.documented = documented_minimum(ctx.target.model, params.documented_min_prefix)
        self.prefix_tokens = params.prefix_tokens or (
            max(1024, round(1.5 * self.documented)) if self.documented else FALLBACK_PREFIX_TOKENS)
        pricing = ctx.target.pricing or Pricing()
        self.write_multiplier = pricing.cache_write_1h if params.ttl == "1h" else pricing.cache_write_5m
        self.ttl_rates = {"5m": pricing.cache_write_5m, "1h": pricing.cache_write_1h}
        self.read_multiplier = pricing.cache_read

    def _sequence(self, seq: str, index: int, **volatile: Any) -> ChatRequest:
        return rq.sequence_request(seq, index, prefix_tokens=self.prefix_tokens, ttl=self.p.ttl,
                                   max_tokens=self.p.max_tokens, protocol=self.protocol,
                                   prompt_cache_key=self.p.prompt_cache_key, **volatile)

    def min_prefix_bounds(self) -> tuple[int, int]:
        """The (low, high) prefix sizes the minimum-prefix search starts from."""
        high = self.p.min_prefix_high or (2 * self.documented if self.documented else 4096)
        return self.p.min_prefix_low, max(high, self.p.min_prefix_low + 1)

    def most_requests(self, case: str) -> int:
        """The most requests `case` sends: its progress total, and what the dry run promises at most
        (the minimum-prefix search stops early when the top size is not cached or the lowest is)."""
        p = self.p
        if case == "min_prefix":
            low, high = self.min_prefix_bounds()
            steps = 0
            while high - low > p.min_prefix_resolution:     # the search's longest path: the wider half
                middle = (low + high) // 2
                low, high = (low, middle) if middle - low >= high - middle else (middle, high)
                steps += 1
            return 1 + 2 * (2 + steps)       # the baseline, the top and lowest sizes, each step's pair
        fixed = {"repeat": p.requests, "volatile": p.requests * len(p.volatile_positions),
                 "lookback": 2 * 2 * len(p.lookback_blocks), "fanout": 1 + 2 * p.fanout_requests,
                 "tiers": 1 + len(rq.TIER_CHANGES), "ttl": 3}
        return fixed[case]

    async def repeat(self) -> None:
        seq = nonce()
        labels = {"sequence": seq, "prefix_tokens": self.prefix_tokens, "ttl": self.p.ttl,
                  "write_multiplier": self.write_multiplier, "read_multiplier": self.read_multiplier,
                  "write_multiplier_5m": self.ttl_rates["5m"], "write_multiplier_1h": self.ttl_rates["1h"]}
        for i in range(self.p.requests):
            await self.ctx.send(self._sequence(seq, i), case="repeat", labels={**labels, "index": i})

    async def volatile(self) -> None:
        for position in self.p.volatile_positions:
            seq = nonce()
            labels = {"sequence": seq, "position": position, "prefix_tokens": self.prefix_tokens}
            for i in range(self.p.requests):
                request = self._sequence(seq, i, stamp=rq.timestamp(), position=position)
                await self.ctx.send(request, case="volatile", labels={**labels, "index": i})

    async def lookback(self) -> None:
        tool_words = rq.tools_words(self.prefix_tokens)
        for every, mode in ((None, "end"), (self.p.lookback_breakpoint_every, "extra")):
            for n in self.p.lookback_blocks:
                seq = nonce()
                writer, reader = rq.lookback_conversation(seq, n, every=every, ttl=self.p.ttl)
                system = rq.system_blocks(rq.system_text(seq, max(1, self.prefix_tokens - tool_words - 60)), None)
                labels = {"sequence": seq, "n": n, "breakpoints": mode, "breakpoint_every": every}
                for role, messages in (("writer", writer), ("reader", reader)):
                    request = ChatRequest(messages=messages, system=system, tools=rq.prefix_tools(seq, tool_words),
                                          max_tokens=self.p.max_tokens, stream=True)
                    await self.ctx.send(request, case="lookback", labels={**labels, "role": role})

    async def min_prefix(self) -> None:
        p = self.p
        _, high = self.min_prefix_bounds()
        baseline = await self._min_prefix_baseline()
        words_per_token = 1.0

        async def cached_at(tokens: int) -> bool:
            nonlocal words_per_token
            seq = nonce()
            words = max(1, round(tokens * words_per_token))

            def request(index: int) -> ChatRequest:
                return rq.plain_prefix_request(seq, words, index, ttl=p.ttl, max_tokens=p.max_tokens,
                                               protocol=self.protocol, prompt_cache_key=p.prompt_cache_key)

            labels: dict[str, Any] = {"sequence": seq, "target_tokens": tokens, "words": words}
            counted = await self.ctx.count_tokens(request(0)) if baseline[0] == "count_tokens" else None
            writer = await self.ctx.send(request(0), case="min_prefix", labels={**labels, "role": "writer"})
            if counted is not None and baseline[1] is not None:
                measured: int | None = counted - baseline[1]
            else:
                total = prompt_total(_as_row(writer))
                measured = None if total is None or baseline[1] is None else total - baseline[1]
            labels.update(prefix_tokens=measured, counted_by=baseline[0] if measured is not None else None)
            reader = await self.ctx.send(request(1), case="min_prefix", labels={**labels, "role": "reader"})
            if measured and measured > 0:
                words_per_token = words / measured
            read = reported_read(_as_row(reader))
            return read is not None and read >= CACHED_SHARE * (measured or tokens)

        if not await cached_at(high) or await cached_at(p.min_prefix_low):
            return
        low = p.min_prefix_low
        while high - low > p.min_prefix_resolution:
            middle = (low + high) // 2
            if await cached_at(middle):
                high = middle
            else:
                low = middle

    async def _min_prefix_baseline(self) -> tuple[str, int | None]:
        """The tokens of a min_prefix request without its system prompt, which are subtracted to
        measure a prefix: by count_tokens where the endpoint has it, else from a sent request."""
        request = rq.plain_prefix_request(nonce(), 0, 0, ttl=self.p.ttl, max_tokens=self.p.max_tokens,
                                          protocol=self.protocol, prompt_cache_key=self.p.prompt_cache_key)
        counted = await self.ctx.count_tokens(request)
        if counted is not None:
            return "count_tokens", counted
        sent = await self.ctx.send(request, case="min_prefix", labels={"role": "baseline"})
        return "usage", prompt_total(_as_row(sent))

    async def fanout(self) -> None:
        n = self.p.fanout_requests

        def labels(seq: str, pattern: str, role: str, index: int, **more: Any) -> dict[str, Any]:
            return {"sequence": seq, "pattern": pattern, "role": role, "index": index,
                    "prefix_tokens": self.prefix_tokens, **more}

        # The adapters report a first token only when the whole response is in, so "after the first
        # token" is timed: a pilot request on its own fresh prefix measures a cold TTFT, and the
        # followers go out 1.5 times that long after the writer. Whether they really left after the
        # writer's first token is checked from the stored timestamps (followers_after_first_token).
        seq = nonce()
        pilot = await self.ctx.send(self._sequence(seq, 0), case="fanout", labels=labels(seq, "pilot", "pilot", 0))
        cold_ms = pilot.ttft_ms if pilot.ttft_ms is not None else (pilot.e2e_ms or 1000.0)
        wait_ms = 1.5 * cold_ms

        seq = nonce()
        writer = asyncio.create_task(self.ctx.send(self._sequence(seq, 0), case="fanout",
                                                   labels=labels(seq, "staggered", "writer", 0)))
        await asyncio.sleep(wait_ms / 1000)
        await asyncio.gather(writer, *(
            self.ctx.send(self._sequence(seq, i), case="fanout",
                          labels=labels(seq, "staggered", "follower", i, wait_ms=round(wait_ms, 1)))
            for i in range(1, n)))

        seq = nonce()
        await asyncio.gather(*(self.ctx.send(self._sequence(seq, i), case="fanout",
                                             labels=labels(seq, "simultaneous", "member", i))
                               for i in range(n)))

    async def tiers(self) -> None:
        seq = nonce()
        tier_tokens = self.prefix_tokens
        counts = {tier: await self.ctx.count_tokens(request)
                  for tier, request in rq.tier_count_requests(seq, tier_tokens=tier_tokens, ttl=self.p.ttl).items()}
        boundaries = None
        tools, system, messages, empty = (counts[k] for k in ("tools", "system", "messages", "empty"))
        if tools is not None and system is not None and messages is not None and empty is not None:
            boundaries = {"tools": tools - empty, "system": system - empty, "messages": messages}
        labels = {"sequence": seq, "tier_tokens": boundaries, "prefix_tokens": tier_tokens}

        def request(change: str) -> ChatRequest:
            return rq.tiers_request(seq, change, tier_tokens=tier_tokens, ttl=self.p.ttl, max_tokens=self.p.max_tokens)

        await self.ctx.send(request("base"), case="tiers", labels={**labels, "change": "base"})
        for change, expected in rq.TIER_CHANGES.items():
            await self.ctx.send(request(change), case="tiers",
                                labels={**labels, "change": change, "expected_tier": expected})

    async def ttl(self) -> None:
        seq = nonce()
        wait_s = self.p.ttl_wait_s or TTL_SECONDS[self.p.ttl] + 30
        labels = {"sequence": seq, "ttl": self.p.ttl, "wait_s": wait_s, "prefix_tokens": self.prefix_tokens}
        for i, role in enumerate(("writer", "before_wait", "after_wait")):
            if role == "after_wait":
                await asyncio.sleep(wait_s)
            await self.ctx.send(self._sequence(seq, i), case="ttl", labels={**labels, "role": role, "index": i})


def _as_row(exchange: Exchange) -> SampleRow:
    """The fields of an Exchange the usage readers look at, shaped like a stored row."""
    return {"protocol": exchange.protocol, "usage": exchange.usage, "error_type": exchange.error_type}


# --- summary ---------------------------------------------------------------------------------------

def _ttl_rates(labels: dict[str, Any]) -> dict[str, float] | None:
    """The per-TTL write rates a sequence was priced with (absent on samples stored before they
    were labelled: those price every write at the configured TTL, as then)."""
    rates = {ttl: labels[f"write_multiplier_{ttl}"] for ttl in _TTL_WRITE_FIELDS
             if isinstance(labels.get(f"write_multiplier_{ttl}"), (int, float))}
    return rates or None


class _Summary:
    def __init__(self, rows: list[SampleRow], params: CachingParams, *, run_id: str, target: str,
                 probe: str) -> None:
        self.rows = rows
        self.p = params
        self.reads = CacheReads(rows)
        self.collected = MetricCollector(run_id=run_id, target=target, probe=probe)
        self.by_case: dict[str, list[SampleRow]] = defaultdict(list)
        for row in rows:
            self.by_case[row["case"]].append(row)

    def add(self, name: str, value: float | None, labels: dict[str, Any], *, n: int | None = None,
            unit: str | None = None, ci: tuple[float | None, float | None] = (None, None)) -> None:
        self.collected.add(name, value, labels, n, unit, ci)

    def share(self, name: str, successes: int, n: int, labels: dict[str, Any]) -> None:
        self.collected.share(name, successes, n, labels)

    def hit(self, row: SampleRow) -> bool | None:
        read = self.reads(row)
        return None if read is None else read >= self.p.hit_min_tokens

    def metrics(self) -> list[Metric]:
        protocol = self.rows[0]["protocol"] if self.rows else None
        for case in self.p.cases:
            if case in ANTHROPIC_ONLY and protocol != "anthropic":
                self.add("skipped", 1, {"case": case, "reason": "anthropic protocol only"}, unit="bool")
            elif self.by_case.get(case):
                getattr(self, f"_{case}")(self.by_case[case])
        self._usage()
        return self.collected.metrics

    # each case ------------------------------------------------------------------------------------

    def _hits_and_fraction(self, rows: list[SampleRow], labels: dict[str, Any]) -> None:
        """Hit rate, read fraction and median cache-read tokens over the non-first requests."""
        later = [r for r in rows if r["labels"].get("index", 0) >= 1]
        known = [r for r in later if self.reads(r) is not None]
        hits = sum(1 for r in known if self.hit(r))
        if self.reads.available:
            self.share("hit_rate", hits, len(known), labels)
        else:
            self.add("hit_rate", None, labels, n=0, unit="ratio")
        pairs = [(read, total) for r in known
                 if (read := self.reads(r)) is not None and (total := prompt_total(r))]
        total = sum(t for _, t in pairs)
        self.add("read_fraction", sum(r for r, _ in pairs) / total if total else None, labels,
                 n=len(pairs), unit="ratio")
        self.collected.percentile("cached_tokens_p50", [read for read, _ in pairs], 50, labels, "tokens")

    def _repeat(self, rows: list[SampleRow]) -> None:
        labels = {"case": "repeat"}
        self._hits_and_fraction(rows, labels)
        ok = [r for r in rows if not r.get("error_type")]
        first = [t for r in ok if r["labels"]["index"] == 0 and (t := r.get("ttft_ms")) is not None]
        hit_ttft = [t for r in ok if r["labels"]["index"] >= 1 and self.hit(r) and (t := r.get("ttft_ms")) is not None]
        first_ms, hit_ms = stats.median(first), stats.median(hit_ttft)
        self.collected.percentile("ttft_first_ms", first, 50, labels, "ms")
        self.collected.percentile("ttft_hit_p50_ms", hit_ttft, 50, labels, "ms")
        self.add("ttft_hit_vs_first", hit_ms / first_ms if hit_ms is not None and first_ms else None,
                 labels, n=len(hit_ttft), unit="ratio")
        for seq_rows in _by_sequence(rows).values():
            seq_rows.sort(key=lambda r: r["labels"]["index"])
            first_labels = seq_rows[0]["labels"]
            value, writes = cost_multiplier(seq_rows, self.reads, first_labels["write_multiplier"],
                                            first_labels["read_multiplier"], _ttl_rates(first_labels))
            self.add("cost_multiplier", value, {**labels, "ttl": first_labels["ttl"], "writes": writes},
                     n=len(seq_rows), unit="ratio")

    def _volatile(self, rows: list[SampleRow]) -> None:
        by_position: dict[str, list[SampleRow]] = defaultdict(list)
        for row in rows:
            by_position[row["labels"]["position"]].append(row)
        for position in rq.VOLATILE_POSITIONS:
            if by_position.get(position):
                self._hits_and_fraction(by_position[position], {"case": "volatile", "position": position})

    def _lookback(self, rows: list[SampleRow]) -> None:
        reads_previous: dict[tuple[str, int], bool | None] = {}
        for seq_rows in _by_sequence(rows).values():
            roles = {r["labels"]["role"]: r for r in seq_rows}
            writer, reader = roles.get("writer"), roles.get("reader")
            if writer is None or reader is None:
                continue
            n, mode = reader["labels"]["n"], reader["labels"]["breakpoints"]
            read, written = self.reads(reader), prompt_total(writer)
            previous = None if read is None or not written else read >= READS_PREVIOUS_SHARE * written
            reads_previous[(mode, n)] = previous
            labels = {"case": "lookback", "n": n, "breakpoints": mode}
            self.add("read_tokens", read, labels, n=1, unit="tokens")
            self.add("reads_previous", None if previous is None else float(previous), labels, n=1, unit="bool")
        ends = sorted((n, ok) for (mode, n), ok in reads_previous.items() if mode == "end" and ok is not None)
        limit = None
        for n, ok in ends:
            if not ok:
                break
            limit = n
        labels = {"case": "lookback"}
        self.add("lookback_limit", limit, labels, n=len(ends), unit="blocks")
        self.add("lookback_limit_found", None if not ends else float(any(not ok for _, ok in ends)), labels,
                 n=len(ends), unit="bool")
        missed = [n for n, ok in ends if not ok]
        recovered = [n for n in missed if reads_previous.get(("extra", n))]
        if missed:
            self.share("extra_breakpoints_recover", len(recovered), len(missed), labels)
        else:
            self.add("extra_breakpoints_recover", None, labels, n=0, unit="ratio")

    def _min_prefix(self, rows: list[SampleRow]) -> None:
        labels = {"case": "min_prefix"}
        tried: list[tuple[int, bool]] = []
        for seq_rows in _by_sequence(rows).values():
            reader = next((r for r in seq_rows if r["labels"].get("role") == "reader"), None)
            if reader is None or reader["labels"].get("prefix_tokens") is None:
                continue
            read, size = self.reads(reader), reader["labels"]["prefix_tokens"]
            if read is not None:
                tried.append((size, read >= max(1, CACHED_SHARE * size)))
        cached = [size for size, ok in tried if ok]
        smallest = min(cached) if cached else None
        below = [size for size, ok in tried if not ok and (smallest is None or size < smallest)]
        largest_miss = max(below) if below else None
        model = next((body.get("model") for r in rows if isinstance(body := r.get("request_body"), dict)), "")
        documented = documented_minimum(model or "", self.p.documented_min_prefix)
        self.add("min_prefix_tokens", smallest, labels, n=len(tried), unit="tokens")
        self.add("largest_uncached_tokens", largest_miss, labels, n=len(tried), unit="tokens")
        self.add("documented_min_prefix_tokens", documented, labels, unit="tokens")
        agrees = None
        if documented is not None and tried:
            if smallest is None:
                agrees = 0.0 if largest_miss is not None and largest_miss >= documented else None
            else:
                agrees = float((largest_miss is None or largest_miss < documented) and documented <= smallest)
        self.add("min_prefix_agrees", agrees, labels, n=len(tried), unit="bool")

    def _fanout(self, rows: list[SampleRow]) -> None:
        for pattern in ("simultaneous", "staggered"):
            members = [r for r in rows if r["labels"]["pattern"] == pattern]
            if not members:
                continue
            labels = {"case": "fanout", "pattern": pattern}
            known = [r for r in members if self.reads(r) is not None]
            hits = sum(1 for r in known if self.hit(r))
            self.share("hit_rate", hits, len(known), labels)
            self.add("hits", hits, labels, n=len(known), unit="requests")
            if pattern == "staggered":
                writer = next((r for r in members if r["labels"]["role"] == "writer"), None)
                followers = [r for r in members if r["labels"]["role"] == "follower"]
                if writer is not None and (writer_ttft := writer.get("ttft_ms")) is not None:
                    first_token = writer["started_at"].timestamp() + writer_ttft / 1000
                    after = sum(1 for r in followers if r["started_at"].timestamp() >= first_token)
                    self.share("followers_after_first_token", after, len(followers), labels)
                waits = [wait for r in followers if (wait := r["labels"].get("wait_ms")) is not None]
                self.collected.percentile("stagger_wait_ms", waits, 50, labels, "ms")

    def _tiers(self, rows: list[SampleRow]) -> None:
        matches = []
        for seq_rows in _by_sequence(rows).values():
            base = next((r for r in seq_rows if r["labels"]["change"] == "base"), None)
            boundaries = seq_rows[0]["labels"].get("tier_tokens")
            if boundaries is None:
                # No count_tokens: the three tiers are built to about the same size.
                total = prompt_total(base) if base is not None else None
                if not total:
                    continue
                boundaries = {"tools": total / 3, "system": 2 * total / 3, "messages": total}
            for row in seq_rows:
                change = row["labels"]["change"]
                if change == "base":
                    continue
                expected = row["labels"]["expected_tier"]
                read = self.reads(row)
                observed = classify_tier(read, boundaries, self.p.hit_min_tokens)
                labels = {"case": "tiers", "change": change, "expected_tier": expected}
                self.add("read_tokens", read, labels, n=1, unit="tokens")
                self.add("expected_read_tokens", 0 if expected == "none" else boundaries[expected], labels,
                         unit="tokens")
                self.add("expected_tier_level", rq.TIERS.index(expected), labels, unit="level")
                self.add("observed_tier_level", None if observed is None else rq.TIERS.index(observed), labels,
                         unit="level")
                if observed is not None:
                    matches.append(observed == expected)
                self.add("tier_match", None if observed is None else float(observed == expected), labels,
                         n=1, unit="bool")
        self.share("tier_match_rate", sum(matches), len(matches), {"case": "tiers"})

    def _ttl(self, rows: list[SampleRow]) -> None:
        for seq_rows in _by_sequence(rows).values():
            roles = {r["labels"]["role"]: r for r in seq_rows}
            labels = {"case": "ttl", "ttl": seq_rows[0]["labels"]["ttl"]}
            for role in ("before_wait", "after_wait"):
                hit = self.hit(roles[role]) if role in roles else None
                self.add(f"hit_{role}", None if hit is None else float(hit), labels, n=1, unit="bool")
            self.add("waited_s", seq_rows[0]["labels"]["wait_s"], labels, unit="s")

    # usage conformance ----------------------------------------------------------------------------

    def _usage(self) -> None:
        labels = {"case": "usage"}
        ok = [r for r in self.rows if not r.get("error_type") and r.get("usage")]
        self.add("cache_reporting_available", float(self.reads.available), labels, n=len(ok), unit="bool")
        self.share("cache_read_reported", sum(1 for r in ok if reported_read(r) is not None), len(ok), labels)
        self.share("cache_write_reported", sum(1 for r in ok if reported_write(r) is not None), len(ok), labels)
        totals_off = self._unstable_totals()
        consistent = sum(1 for r in ok if usage_problems(r) == [] and id(r) not in totals_off)
        self.share("usage_consistent", consistent, len(ok), labels)

        # Timing cross-check: a reported hit should come with a lower TTFT than a cold request on
        # the same prefix length. Cold: the volatile system_start requests (all misses) when they
        # ran, else the repeat sequence's first request.
        repeat = [r for r in self.by_case.get("repeat", []) if not r.get("error_type")]
        cold = [t for r in self.by_case.get("volatile", [])
                if r["labels"]["position"] == "system_start" and not r.get("error_type") and (t := r.get("ttft_ms"))]
        if not cold:
            cold = [t for r in repeat if r["labels"]["index"] == 0 and (t := r.get("ttft_ms"))]
        later = [r for r in repeat if r["labels"]["index"] >= 1]
        warm = [t for r in later if (t := r.get("ttft_ms"))]
        cold_ms, warm_ms = stats.median(cold), stats.median(warm)
        ratio = warm_ms / cold_ms if cold_ms and warm_ms is not None else None
        self.add("ttft_warm_vs_cold", ratio, labels, n=len(warm), unit="ratio")
        # An endpoint that never reports cache reads reports no hits, so a TTFT drop there is
        # flagged too: it caches without saying so.
        known = [bool(self.hit(r)) for r in later if self.hit(r) is not None or not self.reads.available]
        mismatch = None
        if ratio is not None and known:
            reported_hits = sum(known) >= len(known) / 2
            mismatch = float(reported_hits != (ratio < self.p.timing_faster_ratio))
        self.add("timing_mismatch", mismatch, labels, n=len(warm), unit="bool")

    def _unstable_totals(self) -> set[int]:
        """Rows of repeat and volatile sequences whose total prompt differs from their sequence's
        first request by more than the tolerance: the sign of a wrong total, e.g. input_tokens that
        includes the cached tokens, so input + read counts them twice."""
        off: set[int] = set()
        absolute, relative = TOTAL_TOLERANCE
        for case in ("repeat", "volatile"):
            for seq_rows in _by_sequence(self.by_case.get(case, [])).values():
                ok = sorted(((r, total) for r in seq_rows
                             if not r.get("error_type") and (total := prompt_total(r)) is not None),
                            key=lambda pair: pair[0]["labels"]["index"])
                if not ok:
                    continue
                reference = ok[0][1]
                for row, total in ok[1:]:
                    if abs(total - reference) > max(absolute, relative * reference):
                        off.add(id(row))
        return off


def usage_problems(row: SampleRow) -> list[str]:
    """What is wrong with one sample's usage on its own: negative or non-integer counts, and
    OpenAI cached_tokens above prompt_tokens."""
    usage = row.get("usage") or {}
    problems = []
    fields: dict[str, Any]
    if row.get("protocol") == "anthropic":
        fields = {k: usage.get(k) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
                  if k in usage}
        if "input_tokens" not in usage:
            problems.append("input_tokens missing")
    else:
        fields = {"prompt_tokens": usage.get("prompt_tokens"), **{
            f"prompt_tokens_details.{k}": v for k, v in _details(usage).items()
            if k in ("cached_tokens", "cache_write_tokens")}}
        cached, prompt = _int(_details(usage).get("cached_tokens")), _int(usage.get("prompt_tokens"))
        if cached is not None and prompt is not None and cached > prompt:
            problems.append("cached_tokens above prompt_tokens")
    for name, value in fields.items():
        if value is not None and (_int(value) is None or value < 0):
            problems.append(f"{name} is {value!r}")
    return problems


def _by_sequence(rows: Sequence[SampleRow]) -> dict[str, list[SampleRow]]:
    groups: dict[str, list[SampleRow]] = defaultdict(list)
    for row in rows:
        groups[row["labels"].get("sequence", "")].append(row)
    return groups
