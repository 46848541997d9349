"""The requests the caching probe sends: frozen prefixes, volatile values, growing conversations
and single-field changes. Pure functions; `prober/probes/caching.py` decides what to send when.

Every sequence of requests gets its own nonce at the start of the first tool's description and of
the system text, so its first request is new to every cache (the hosted APIs', a self-hosted
server's slots, and the emulator's), and sequences never read each other's entries.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from prober.core.records import ChatRequest
from prober.probes.prompts import filler_words

# Where the changing value goes (issue: start of the system prompt, middle, just before the
# breakpoint, after the breakpoint in the user turn).
VOLATILE_POSITIONS = ("system_start", "system_middle", "before_breakpoint", "user_turn")

# The single changes of the tiers case, with the deepest tier each should leave readable
# (hosted-apis.md, "What invalidates which tier"): tool definitions invalidate everything; system
# text keeps the tools tier; tool_choice, thinking on/off and message content keep tools + system.
# "none" is the control: nothing changed, so everything up to the last breakpoint is read. It goes
# first, straight after the base request: a server that keeps one prompt per slot (llama-server)
# would otherwise lose the base prompt to an earlier change.
TIER_CHANGES: dict[str, str] = {
    "none": "messages",
    "tools": "none",
    "system": "tools",
    "tool_choice": "system",
    "thinking": "system",
    "messages": "system",
}
TIERS = ("none", "tools", "system", "messages")   # in render order; the index is the tier's level

THINKING_BUDGET = 1024   # the smallest budget_tokens Anthropic accepts

_TOOL_WORDS = 24         # filler words per tool description in the ordinary prefix


def cache_control(ttl: str) -> dict[str, Any]:
    """A breakpoint. "5m" is the API's default and is left implicit, as most callers write it."""
    return {"type": "ephemeral", "ttl": ttl} if ttl != "5m" else {"type": "ephemeral"}


def timestamp() -> str:
    """The volatile value: the kind of line that kills caches in production prompts."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


def prefix_tools(seq: str, words: int = _TOOL_WORDS, edit: str = "") -> list[dict[str, Any]]:
    """Two tool definitions, in Anthropic's shape (the OpenAI adapter converts them). `edit` is
    inserted right after the nonce, to change the tool definitions and nothing else."""
    half = max(1, words // 2)
    return [
        {"name": "get_weather",
         "description": f"[{seq}] {edit}Current weather for a city. {filler_words(half)}",
         "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}},
        {"name": "lookup_order",
         "description": f"Status of a customer order. {filler_words(words - half, offset=7)}",
         "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}},
                          "required": ["order_id"]}},
    ]


def tools_words(prefix_tokens: int) -> int:
    """Filler words in the tool descriptions of an ordinary prefix, so that tools + system together
    come to about `prefix_tokens` (the schemas and names add some tokens of their own)."""
    return min(_TOOL_WORDS, prefix_tokens // 4)


def system_text(seq: str, words: int, *, stamp: str | None = None, position: str | None = None,
                edit: str = "") -> str:
    """About `words` tokens of frozen system prompt, with `stamp` at a system position if given."""
    head = f"[{seq}] {edit}You are a support assistant. Reference material follows.\n"
    if stamp is not None and position == "system_start":
        return f"Current time: {stamp}\n{head}{filler_words(words)}"
    if stamp is not None and position == "system_middle":
        half = words // 2
        return (f"{head}{filler_words(half)}\nCurrent time: {stamp}\n"
                f"{filler_words(words - half, offset=half)}")
    if stamp is not None and position == "before_breakpoint":
        return f"{head}{filler_words(words)}\nCurrent time: {stamp}"
    return head + filler_words(words)


def system_blocks(text: str, ttl: str | None) -> list[dict[str, Any]]:
    """One system block, with a breakpoint on it unless `ttl` is None."""
    block: dict[str, Any] = {"type": "text", "text": text}
    if ttl is not None:
        block["cache_control"] = cache_control(ttl)
    return [block]


def question(index: int, stamp: str | None = None) -> str:
    """The last user message: the only part of a sequence's requests that differs."""
    text = f"Question {index}: in one short sentence, what is item {index} about?"
    return f"{text} (sent at {stamp})" if stamp is not None else text


def extra_fields(protocol: str, prompt_cache_key: str | None) -> dict[str, Any]:
    # Both OpenAI APIs take the key (chat completions and Responses); Anthropic's has none.
    return {"prompt_cache_key": prompt_cache_key} if protocol != "anthropic" and prompt_cache_key else {}


def sequence_request(seq: str, index: int, *, prefix_tokens: int, ttl: str, max_tokens: int,
                     protocol: str, prompt_cache_key: str | None = None, stamp: str | None = None,
                     position: str | None = None) -> ChatRequest:
    """Request `index` of a sequence sharing a frozen prefix (tools + system) of about
    `prefix_tokens` tokens, with the breakpoint on the last (only) system block. A `stamp` goes
    where `position` says (see VOLATILE_POSITIONS)."""
    tool_words = tools_words(prefix_tokens)
    words = max(1, prefix_tokens - tool_words - 60)   # 60: tool names and schemas, the system head
    user_stamp = stamp if position == "user_turn" else None
    return ChatRequest(
        messages=[{"role": "user", "content": question(index, user_stamp)}],
        system=system_blocks(system_text(seq, words, stamp=stamp, position=position), ttl),
        tools=prefix_tools(seq, tool_words),
        max_tokens=max_tokens,
        stream=True,
        extra=extra_fields(protocol, prompt_cache_key),
    )


def plain_prefix_request(seq: str, words: int, index: int, *, ttl: str, max_tokens: int, protocol: str,
                         prompt_cache_key: str | None = None) -> ChatRequest:
    """A system prompt of `words` filler words and no tools (min_prefix). `words` = 0 leaves the
    system out altogether: the baseline whose tokens are subtracted to measure a prefix."""
    return ChatRequest(
        messages=[{"role": "user", "content": question(index)}],
        system=system_blocks(system_text(seq, words), ttl) if words > 0 else None,
        max_tokens=max_tokens,
        stream=True,
        extra=extra_fields(protocol, prompt_cache_key),
    )


# --- lookback (Anthropic content blocks) -----------------------------------------------------------

def breakpoint_positions(n: int, every: int | None) -> list[int]:
    """Which of the n new blocks (1-based) carry a breakpoint: the last one, and with `every` also
    every `every`-th block before it."""
    marks = list(range(every, n, every)) if every else []
    return [*marks, n]


def lookback_conversation(seq: str, n: int, *, every: int | None, ttl: str
                          ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(writer messages, reader messages). The writer's one block carries a breakpoint; the reader
    repeats it without one and appends n blocks: an assistant turn of n/2 tool_use blocks and a
    user turn of their n/2 tool_result blocks, with breakpoints at `breakpoint_positions`."""
    opening = f"Task {seq}: check the weather in each city I name, one tool call per city."
    writer = [{"role": "user", "content": [{"type": "text", "text": opening,
                                            "cache_control": cache_control(ttl)}]}]
    pairs = n // 2
    uses: list[dict[str, Any]] = [{"type": "tool_use", "id": f"toolu_{seq}_{k:02d}", "name": "get_weather",
             "input": {"city": f"city {k}"}} for k in range(pairs)]
    results: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": f"toolu_{seq}_{k:02d}",
                "content": f"city {k}: sunny, {10 + k} degrees"} for k in range(pairs)]
    new_blocks = uses + results
    for position in breakpoint_positions(n, every):
        new_blocks[position - 1]["cache_control"] = cache_control(ttl)
    reader = [{"role": "user", "content": [{"type": "text", "text": opening}]},
              {"role": "assistant", "content": uses},
              {"role": "user", "content": results}]
    return writer, reader


# --- tiers -------------------------------------------------------------------------------------------

def tiers_request(seq: str, change: str, *, tier_tokens: int, ttl: str, max_tokens: int) -> ChatRequest:
    """The tiers case's base request with exactly one thing changed (`change` "base" or "none":
    nothing). Three tiers of about `tier_tokens` tokens each (tool definitions, system text, one
    user message), a breakpoint at the end of each, and tool_choice auto."""
    control = cache_control(ttl)
    tools = prefix_tools(seq, words=tier_tokens, edit="Revised. " if change == "tools" else "")
    tools[-1]["cache_control"] = control
    system = system_text(seq, tier_tokens, edit="Revised. " if change == "system" else "")
    opening = "Revised. " if change == "messages" else ""
    message = (f"{opening}Here are my notes. {filler_words(tier_tokens, offset=3)}\n"
               f"Which tool fits these notes? Answer in one word.")
    request = ChatRequest(
        messages=[{"role": "user", "content": [{"type": "text", "text": message, "cache_control": control}]}],
        system=system_blocks(system, ttl),
        tools=tools,
        tool_choice={"type": "none"} if change == "tool_choice" else {"type": "auto"},
        max_tokens=max_tokens,
        stream=True,
    )
    if change == "thinking":
        request.extra = {"thinking": {"type": "enabled", "budget_tokens": THINKING_BUDGET}}
        request.max_tokens = THINKING_BUDGET + max_tokens   # must exceed the budget
    return request


def tier_count_requests(seq: str, *, tier_tokens: int, ttl: str) -> dict[str, ChatRequest]:
    """Requests whose count_tokens differences give the tier boundaries: a one-word conversation
    alone, with the tools, with tools and system; and the whole base request."""
    base = tiers_request(seq, "base", tier_tokens=tier_tokens, ttl=ttl, max_tokens=1)
    tiny = [{"role": "user", "content": "Hi."}]
    return {
        "empty": ChatRequest(messages=tiny),
        "tools": ChatRequest(messages=tiny, tools=base.tools),
        "system": ChatRequest(messages=tiny, tools=base.tools, system=base.system),
        "messages": base,
    }
