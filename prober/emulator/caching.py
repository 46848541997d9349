"""Prompt caching as the hosted APIs document it: Anthropic's breakpoints, OpenAI's automatic caching.

One behaviour, `PromptCache`, keeps the entries. It runs once per request, when the request
arrives (before it queues for a slot): it looks the prompt up, fills the usage, shortens prefill
by the tokens read, and registers the request's writes. Token counts are the emulator tokenizer's,
so `count_tokens` and usage agree with the cache: for a request, count_tokens = total prompt =
input_tokens + cache_creation_input_tokens + cache_read_input_tokens (Anthropic) = prompt_tokens
(OpenAI). Scenario knobs: the `[cache]` table (scenario.CacheScenario).

Anthropic (POST /v1/messages)
- Render. The prompt is one sequence of blocks: tool definitions, then system blocks, then message
  content blocks (text, image, tool_use, tool_result, document: one block each; a string `system`
  or `content` is one block). The entry key at block i hashes the model and everything rendered up
  to and including block i. Request settings render between the sections: `speed` and "a document
  has citations enabled" at the start of the system section, where server tools whose type starts
  with `web_search` render too; `tool_choice`, `thinking` and "the prompt holds an image" at the
  start of the messages section. This reproduces the invalidation table: tool definitions or the
  model miss everywhere; system text, speed, web search, citations keep the tools tier; tool_choice,
  thinking, images and message content keep tools + system.
- Breakpoints: `cache_control {"type": "ephemeral", "ttl": "5m" | "1h"}` on tools, system blocks and
  message content blocks; a top-level `cache_control` marks the last block (once, if that block
  has its own). More than 4 is a 400 invalid_request_error (checked by anthropic_wire, with the shape).
- Minimum. A breakpoint whose prefix (tokens up to and including its block) is below the model's
  minimum neither reads nor writes (`min_tokens`, `default_min_tokens`).
- Read. Each breakpoint at block p looks for a live entry at p, then at p-1 ... p-lookback_blocks
  (20), nearest first. cache_read = the longest prefix found by any breakpoint. So a conversation
  that grew by 20 blocks since its last entry hits, by 21 misses, unless a breakpoint in between
  reaches back to it.
- Write. Each breakpoint at or above the minimum whose prefix is longer than what was read writes
  its entry. cache_creation = longest such prefix - cache_read, split into ephemeral_5m / 1h by
  the TTL of the breakpoint that ends each stretch. input_tokens = the rest (after the last
  breakpoint, or everything if nothing was cacheable).
- Readable only once streaming began: a written entry becomes readable when the writing
  response's first content token is written to the socket (a non-streaming response: its body).
  N requests sent at once all write and none reads; requests sent after the first one's first
  token read. A request that ends without a first token (an immediate fault) leaves nothing.
- TTL: "5m" (default) or "1h", on the cache clock. A read refreshes the entry read and the live
  entries at the request's breakpoints, each to its own TTL.

OpenAI (POST /v1/chat/completions)
- Automatic: a prompt of openai_min_tokens (1,024) tokens or more writes an entry at every multiple
  of openai_step_tokens (128) from the minimum up to its length; the key hashes the model,
  `prompt_cache_key` and the tokens (tools, then messages, with their roles). cached_tokens = the
  longest live entry: a multiple of 128, at least 1,024, or 0. Same readability rule. TTL
  openai_ttl_s (600 s; 24 h with prompt_cache_retention "24h"), refreshed on a read.

Usage (scenario cache_usage_fields, default true; false hides the fields but still caches, so
TTFT still drops on hits). Anthropic: input_tokens (uncached remainder), cache_creation_input_tokens,
cache_read_input_tokens, and cache_creation {ephemeral_5m_input_tokens, ephemeral_1h_input_tokens}
when the request has a breakpoint; in message_start.message.usage and in the non-streaming body.
OpenAI: usage.prompt_tokens_details.cached_tokens. `[cache] enabled = false`: nothing is ever
read or written, the fields report 0.

Clock. TTLs run on a cache clock: monotonic seconds times `[cache] time_scale` (time_scale = 300
makes "5m" last one real second). Tests inject any `() -> float` as `PromptCache(scenario, clock=...)`.

Ground truth: each request's record carries behaviours["cache"] = {
    prompt_tokens, read_tokens, written_tokens, uncached_tokens (= prompt - read - written),
    written_5m_tokens, written_1h_tokens (Anthropic; None for OpenAI), minimum_tokens,
    matched_breakpoint  index (render order, from 0) of the breakpoint whose search found the entry read
    matched_block       block index (render order, from 0) of the entry read
    miss_reason         None when read_tokens > 0, else disabled | no_breakpoint | below_minimum |
                        not_yet_readable | expired | lookback_exceeded | no_entry (first that applies)
    breakpoints         [{block, prefix_tokens, ttl, outcome (hit | below_minimum | disabled | a miss
                        reason), matched_block (hits), wrote}] (Anthropic; [] for OpenAI)
}
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from prober.emulator.plan import GenRequest, PromptBlock, ResponsePlan
from prober.emulator.scenario import Scenario
from prober.emulator.tokenizer import tokenize

if TYPE_CHECKING:
    from prober.emulator.behaviours import ServerState

TTL_S: dict[str, float] = {"5m": 300.0, "1h": 3600.0}
OPENAI_24H_S = 24 * 3600.0
_KEEP_EXPIRED_S = 3600.0   # cache-clock seconds an expired entry is remembered, to report "expired"
_MIN_PRUNE_SIZE = 4096     # entries before the first sweep for long-expired ones
# Why a lookup found nothing, most specific first: the request-level reason is the first that applies.
_MISS_ORDER = ("not_yet_readable", "expired", "lookback_exceeded", "no_entry")

State = Literal["live", "pending", "expired", "none"]


class ScaledClock:
    """Monotonic seconds since creation, `scale` times faster than real time."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale
        self._origin = time.monotonic()

    def __call__(self) -> float:
        return (time.monotonic() - self._origin) * self.scale


@dataclass(eq=False)
class Entry:
    ttl_s: float
    readable: bool = False
    expires_at: float = 0.0   # cache clock; set when it becomes readable, moved on by reads
    writers: int = 0          # requests that wrote it and have not sent their first token yet

    def state(self, now: float) -> State:
        if not self.readable:
            return "pending"
        return "live" if now < self.expires_at else "expired"


class CacheStore:
    def __init__(self) -> None:
        self.entries: dict[bytes, Entry] = {}
        self._prune_at = _MIN_PRUNE_SIZE

    def state(self, key: bytes, now: float) -> State:
        entry = self.entries.get(key)
        return "none" if entry is None else entry.state(now)

    def live(self, key: bytes, now: float) -> Entry | None:
        entry = self.entries.get(key)
        return entry if entry is not None and entry.state(now) == "live" else None

    def write(self, key: bytes, ttl_s: float, now: float) -> Entry | None:
        """Join or start the pending entry at `key`; a live one is only refreshed (returns None)."""
        entry = self.entries.get(key)
        if entry is not None and entry.state(now) == "live":
            refresh(entry, now)
            return None
        if entry is None or entry.state(now) == "expired":
            entry = self.entries[key] = Entry(ttl_s)
        entry.ttl_s = max(entry.ttl_s, ttl_s)
        entry.writers += 1
        return entry

    def prune(self, now: float) -> None:
        """Forget long-expired entries once the store has doubled since the last sweep (amortised O(1))."""
        if len(self.entries) < self._prune_at:
            return
        for key in [key for key, entry in self.entries.items()
                    if entry.readable and entry.expires_at + _KEEP_EXPIRED_S < now]:
            del self.entries[key]
        self._prune_at = max(_MIN_PRUNE_SIZE, 2 * len(self.entries))

    def clear(self) -> None:
        self.entries.clear()


def refresh(entry: Entry, now: float) -> None:
    entry.expires_at = max(entry.expires_at, now + entry.ttl_s)


@dataclass
class PendingWrites:
    """One request's writes: readable at its first token, dropped if it ends without one."""

    store: CacheStore
    clock: Callable[[], float]
    entries: list[tuple[bytes, Entry]]
    committed: bool = False

    def commit(self) -> None:
        now = self.clock()
        self.committed = True
        for _, entry in self.entries:
            entry.writers -= 1
            entry.readable = True
            refresh(entry, now)

    def abandon(self) -> None:
        if self.committed:
            return
        for key, entry in self.entries:
            entry.writers -= 1
            if entry.writers == 0 and not entry.readable and self.store.entries.get(key) is entry:
                del self.store.entries[key]


@dataclass
class Outcome:
    prompt_tokens: int
    minimum_tokens: int
    read: int = 0
    written: int = 0
    written_5m: int | None = None    # Anthropic only: `written` split by TTL
    written_1h: int | None = None
    miss_reason: str | None = None
    matched_breakpoint: int | None = None
    matched_block: int | None = None
    breakpoints: list[dict[str, Any]] = field(default_factory=list)
    writes: list[tuple[bytes, Entry]] = field(default_factory=list)
    has_breakpoint: bool = False

    def truth(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "read_tokens": self.read, "written_tokens": self.written,
                "written_5m_tokens": self.written_5m, "written_1h_tokens": self.written_1h,
                "uncached_tokens": self.prompt_tokens - self.read - self.written,
                "minimum_tokens": self.minimum_tokens, "matched_breakpoint": self.matched_breakpoint,
                "matched_block": self.matched_block, "miss_reason": None if self.read else self.miss_reason,
                "breakpoints": self.breakpoints}


# --- Anthropic render ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Boundary:
    """The end of one rendered block: the key of everything up to it and its prompt tokens."""

    key: bytes
    tokens: int
    cache_control: dict[str, Any] | None


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _content_blocks(messages: Any) -> Iterator[dict[str, Any]]:
    """Every content block of the messages, tool_result contents included."""
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict):
                yield block
                inner = block.get("content")
                if block.get("type") == "tool_result" and isinstance(inner, list):
                    yield from (part for part in inner if isinstance(part, dict))


def _is_web_search(tool: Any) -> bool:
    return isinstance(tool, dict) and str(tool.get("type", "")).startswith("web_search")


def anthropic_render(request: GenRequest) -> list[PromptBlock | bytes]:
    """Blocks and section settings (bytes) in cache render order (see the module docstring)."""
    body = request.body
    tools = listed if isinstance(listed := body.get("tools"), list) else []
    tool_blocks = [block for block in request.blocks if block.section == "tools"]
    web = {i for i, tool in enumerate(tools) if _is_web_search(tool)} if len(tools) == len(tool_blocks) else set()
    contents = list(_content_blocks(body.get("messages")))
    system_settings = _canonical({
        "speed": body.get("speed"),
        "citations": any(block.get("type") == "document" and isinstance(block.get("citations"), dict)
                         and block["citations"].get("enabled") is True for block in contents)})
    messages_settings = _canonical({
        "tool_choice": body.get("tool_choice"), "thinking": body.get("thinking"),
        "images": any(block.get("type") == "image" for block in contents)})
    return [*(block for i, block in enumerate(tool_blocks) if i not in web),
            b"system:" + system_settings,
            *(block for i, block in enumerate(tool_blocks) if i in web),
            *(block for block in request.blocks if block.section == "system"),
            b"messages:" + messages_settings,
            *(block for block in request.blocks if block.section == "messages")]


def anthropic_boundaries(request: GenRequest) -> list[Boundary]:
    digest = hashlib.sha256(b"anthropic\x00" + request.model.encode()).digest()
    tokens = 0
    boundaries: list[Boundary] = []
    for item in anthropic_render(request):
        if isinstance(item, bytes):
            digest = hashlib.sha256(digest + b"\x01" + item).digest()
            continue
        head = f"\x02{item.section}\x00{item.role or ''}\x00".encode()
        digest = hashlib.sha256(digest + head + item.text.encode()).digest()
        tokens += item.tokens
        boundaries.append(Boundary(digest, tokens, item.cache_control))
    return boundaries


# --- OpenAI render ------------------------------------------------------------------------------

def openai_boundaries(request: GenRequest, step: int, minimum: int) -> list[tuple[int, bytes]]:
    """(prefix tokens, key) at every multiple of `step` from `minimum` up to the prompt's length."""
    key = request.body.get("prompt_cache_key")
    digest = hashlib.sha256(b"openai\x00" + request.model.encode() + b"\x00" + _canonical(key)).digest()
    tokens: list[str] = []
    marker = ""
    for block in request.blocks:     # a block's first token carries its role, so roles are in the key
        marker += f"\x02{block.section}\x00{block.role or ''}\x00"
        pieces = tokenize(block.text)
        if pieces:
            pieces[0] = marker + pieces[0]
            marker = ""
            tokens.extend(pieces)
    boundaries = []
    for end in range(step, len(tokens) + 1, step):
        digest = hashlib.sha256(digest + "\x00".join(tokens[end - step:end]).encode()).digest()
        if end >= minimum:
            boundaries.append((end, digest))
    return boundaries


# --- the behaviour ------------------------------------------------------------------------------

class PromptCache:
    """The emulator's prompt cache (see the module docstring)."""

    def __init__(self, scenario: Scenario, clock: Callable[[], float] | None = None) -> None:
        self.config = scenario.cache
        self.report = scenario.cache_usage_fields
        self.clock = clock if clock is not None else ScaledClock(self.config.time_scale)
        self.store = CacheStore()
        self._minimums: dict[str, int] = {}

    def reset(self) -> None:
        self.store.clear()

    def min_tokens(self, model: str) -> int:
        """The model's minimum cacheable prefix: the longest matching key of `min_tokens`, else the default."""
        if model not in self._minimums:
            matches = [name for name in self.config.min_tokens if model == name or model.startswith(name + "-")]
            self._minimums[model] = (self.config.min_tokens[max(matches, key=len)] if matches
                                     else self.config.default_min_tokens)
        return self._minimums[model]

    def apply(self, request: GenRequest, plan: ResponsePlan, state: ServerState) -> None:
        now = self.clock()
        self.store.prune(now)
        outcome = self._anthropic(request, now) if request.protocol == "anthropic" else self._openai(request, now)
        plan.cached_prompt_tokens = outcome.read
        if self.report:
            plan.usage.cache_read_tokens = outcome.read
            plan.usage.cache_write_tokens = outcome.written
            if outcome.has_breakpoint:   # Anthropic's cache_creation object
                plan.usage.cache_write_5m_tokens = outcome.written_5m
                plan.usage.cache_write_1h_tokens = outcome.written_1h
        plan.truth["cache"] = outcome.truth()
        if outcome.writes:
            writes = PendingWrites(self.store, self.clock, outcome.writes)
            plan.on_first_token.append(writes.commit)
            plan.on_end.append(writes.abandon)

    # --- Anthropic --------------------------------------------------------------------------------

    def _anthropic(self, request: GenRequest, now: float) -> Outcome:
        if not any(block.cache_control is not None for block in request.blocks):   # the common case, quickly
            outcome = Outcome(request.input_tokens, self.min_tokens(request.model), written_5m=0, written_1h=0)
            outcome.miss_reason = "no_breakpoint" if self.config.enabled else "disabled"
            return outcome
        bounds = anthropic_boundaries(request)
        points = [i for i, bound in enumerate(bounds) if bound.cache_control is not None]
        minimum = self.min_tokens(request.model)
        outcome = Outcome(request.input_tokens, minimum, has_breakpoint=bool(points))
        outcome.breakpoints = [{"block": p, "prefix_tokens": bounds[p].tokens,
                                "ttl": (bounds[p].cache_control or {}).get("ttl", "5m"), "outcome": None,
                                "matched_block": None, "wrote": False} for p in points]
        outcome.written_5m = outcome.written_1h = 0
        eligible = [n for n, p in enumerate(points) if bounds[p].tokens >= minimum]
        for n in range(len(points)):
            if n not in eligible:
                outcome.breakpoints[n]["outcome"] = "below_minimum"
        if not self.config.enabled:
            outcome.miss_reason = "disabled"
            for info in outcome.breakpoints:
                info["outcome"] = "disabled"
            return outcome
        if not points or not eligible:
            outcome.miss_reason = "no_breakpoint" if not points else "below_minimum"
            return outcome

        lookback = self.config.lookback_blocks
        store = self.store
        for n in eligible:
            p, info = points[n], outcome.breakpoints[n]
            window = range(p, max(p - lookback, 0) - 1, -1)
            found = next((q for q in window if store.live(bounds[q].key, now)), None)
            if found is not None:
                info["outcome"], info["matched_block"] = "hit", found
                if outcome.matched_block is None or found > outcome.matched_block:
                    outcome.matched_breakpoint, outcome.matched_block = n, found
                continue
            states = {store.state(bounds[q].key, now) for q in window}
            if "pending" in states:
                info["outcome"] = "not_yet_readable"
            elif "expired" in states:
                info["outcome"] = "expired"
            elif any(store.live(bounds[q].key, now) for q in range(p - lookback)):
                info["outcome"] = "lookback_exceeded"
            else:
                info["outcome"] = "no_entry"

        if outcome.matched_block is not None:
            outcome.read = bounds[outcome.matched_block].tokens
            refresh(store.entries[bounds[outcome.matched_block].key], now)
        else:
            outcome.miss_reason = next(reason for reason in _MISS_ORDER
                                       if any(outcome.breakpoints[n]["outcome"] == reason for n in eligible))
        start = outcome.read
        for n in eligible:
            bound, info = bounds[points[n]], outcome.breakpoints[n]
            if bound.tokens <= outcome.read:
                if (entry := store.live(bound.key, now)) is not None:
                    refresh(entry, now)
                continue
            ttl = info["ttl"]
            entry = store.write(bound.key, TTL_S[ttl], now)
            if entry is not None:
                outcome.writes.append((bound.key, entry))
            info["wrote"] = True
            stretch = bound.tokens - start
            start = bound.tokens
            outcome.written += stretch
            if ttl == "1h":
                outcome.written_1h += stretch
            else:
                outcome.written_5m += stretch
        return outcome

    # --- OpenAI -----------------------------------------------------------------------------------

    def _openai(self, request: GenRequest, now: float) -> Outcome:
        minimum = self.config.openai_min_tokens
        outcome = Outcome(request.input_tokens, minimum)
        if not self.config.enabled:
            outcome.miss_reason = "disabled"
            return outcome
        bounds = (openai_boundaries(request, self.config.openai_step_tokens, minimum)
                  if request.input_tokens >= minimum else [])
        if not bounds:
            outcome.miss_reason = "below_minimum"
            return outcome
        store = self.store
        hit = next((i for i in range(len(bounds) - 1, -1, -1) if store.live(bounds[i][1], now)), None)
        if hit is None:
            states = {store.state(key, now) for _, key in bounds}
            outcome.miss_reason = ("not_yet_readable" if "pending" in states
                                   else "expired" if "expired" in states else "no_entry")
        else:
            outcome.read = bounds[hit][0]
        ttl_s = OPENAI_24H_S if request.body.get("prompt_cache_retention") == "24h" else self.config.openai_ttl_s
        for tokens, key in bounds:
            if tokens <= outcome.read:
                if (entry := store.live(key, now)) is not None:
                    refresh(entry, now)
            elif (entry := store.write(key, ttl_s, now)) is not None:
                outcome.writes.append((key, entry))
        outcome.written = bounds[-1][0] - outcome.read
        return outcome

