"""The neutral records of the behaviour pipeline.

A wire parser turns a request body into a `GenRequest`; the behaviours fill a `ResponsePlan`
(tokens, usage, delays, fault); the engine times it and a wire encoder renders it. Neither record
knows about bytes on the wire.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from prober.emulator.tokenizer import count_tokens

Protocol = Literal["anthropic", "openai"]
Finish = Literal["stop", "length"]

# Errors the emulator can answer with, by meaning; each wire module maps them to its status and body.
ErrorKind = Literal["invalid_request", "not_found", "rate_limit", "overloaded", "server_error"]


class InvalidRequest(Exception):
    """A request body the emulator refuses with 400; `param` names the offending field if known."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class PromptBlock:
    """One piece of the rendered prompt, in render order (tools, then system, then messages)."""

    section: Literal["tools", "system", "messages"]
    text: str
    role: str | None = None
    cache_control: dict[str, Any] | None = None

    @cached_property
    def tokens(self) -> int:
        return count_tokens(self.text)


@dataclass
class GenRequest:
    """A generation request, whatever protocol it came in."""

    protocol: Protocol
    request_id: str
    model: str
    stream: bool
    max_tokens: int | None
    blocks: list[PromptBlock]
    include_usage: bool = False          # OpenAI stream_options.include_usage
    body: dict[str, Any] = field(default_factory=dict, repr=False)   # for behaviours reading other fields

    @cached_property
    def prompt_text(self) -> str:
        return "\n".join(block.text for block in self.blocks)

    @cached_property
    def input_tokens(self) -> int:
        return sum(block.tokens for block in self.blocks)


@dataclass
class Usage:
    """Token counts as the response will report them; None means the field is absent on the wire."""

    input_tokens: int = 0                    # every prompt token, cached or not
    output_tokens: int = 0
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    # cache_write_tokens split by TTL (Anthropic's usage.cache_creation); None: no such object
    cache_write_5m_tokens: int | None = None
    cache_write_1h_tokens: int | None = None


@dataclass
class FaultPlan:
    kind: str                 # one of scenario.FAULT_KINDS
    after_tokens: int = 0     # content tokens sent before a mid-stream fault strikes
    retry_after_s: int = 0
    stall_s: float = 0.0
    close_after_malformed: bool = False


@dataclass
class ResponsePlan:
    tokens: list[str] = field(default_factory=list)
    finish: Finish = "stop"
    usage: Usage = field(default_factory=Usage)
    system_fingerprint: str | None = None
    first_token_delay_s: float = 0.0     # from slot grant to the start of prefill
    prefill_s: float = 0.0
    token_interval_s: float = 0.0
    fault: FaultPlan | None = None
    # Set by a behaviour answering with a tool call (a forced tool_choice): the wire encoders render
    # the tokens as the streamed arguments of one call to this tool instead of as text.
    tool_name: str | None = None
    # What a behaviour decided that tests need to know, by behaviour name; copied into the
    # request's ground-truth record (e.g. {"nondeterminism": {"forked_at_token": 12, ...}}).
    truth: dict[str, Any] = field(default_factory=dict)
    cached_prompt_tokens: int = 0        # prompt tokens served from a prompt cache: prefill skips them
    server_timings: bool = False         # report llama-server-style `timings` (OpenAI route)
    # Callbacks behaviours register: run when the first content token is written (a non-streaming
    # body counts as written with all its tokens), and once the request is over, however it ended.
    on_first_token: list[Callable[[], None]] = field(default_factory=list)
    on_end: list[Callable[[], None]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.tokens)

    def answer(self, tokens: Sequence[str], max_tokens: int | None) -> None:
        """Answer with `tokens`, cut at `max_tokens` (finish "length") when they do not fit."""
        if max_tokens is not None and max_tokens < len(tokens):
            self.tokens, self.finish = list(tokens[:max_tokens]), "length"
        else:
            self.tokens, self.finish = list(tokens), "stop"

    def first_token_written(self) -> None:
        for hook in self.on_first_token:
            hook()

    def ended(self) -> None:
        for hook in self.on_end:
            hook()
