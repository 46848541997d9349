"""Scenario: what the emulator does, set in a TOML file or in code.

Top-level keys set timing, slots and models; the `[faults]` table sets fault rates and the
`[nondeterminism]` table concurrency-dependent output, the `[cache]` table prompt caching, the
`[schema_order]` table accuracy by schema property order, the `[penalty]` table penalty-induced
JSON corruption, the `[gateway]` table what a gateway changes in requests. Ready scenarios, one per
suite's point: examples/scenarios/. Unknown keys
are errors, reported as one line naming the file and the key (`ConfigError`), like prober.toml.

    first_token_delay_ms = 20
    decode_tokens_per_s = 200
    slots = 8
    [faults]
    rate_limit = 0.05
    retry_after_s = 1
"""

from __future__ import annotations

import os
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from prober.core.tomlfile import read_toml, validation_error

# What each fault does to a stream, and (in brackets) to a non-streaming response.
FaultKind = Literal[
    "rate_limit",        # 429 with retry-after, at once, without taking a slot
    "overloaded",        # 529 (Anthropic) / 503 (OpenAI), at once
    "server_error",      # 500, at once
    "drop_mid_stream",   # connection closed after `after_tokens` content tokens [half the body, then close]
    "malformed_sse",     # a truncated-JSON event after `after_tokens` tokens, then continue or close
                         # [a truncated JSON body]
    "stall",             # `stall_s` of silence after `after_tokens` tokens, then the rest [body stall_s late]
    "mid_stream_error",  # HTTP 200, then an error event after `after_tokens` tokens [529 / 503 then]
]
FAULT_KINDS: tuple[str, ...] = get_args(FaultKind)


class _Strict(BaseModel):
    # A typo in a scenario must fail loudly, and a running emulator's scenario never changes.
    model_config = ConfigDict(extra="forbid", frozen=True)


class Faults(_Strict):
    """Per-request fault probabilities (drawn with a seeded RNG) and the faults' parameters."""

    rate_limit: float = Field(0.0, ge=0, le=1)
    overloaded: float = Field(0.0, ge=0, le=1)
    server_error: float = Field(0.0, ge=0, le=1)
    drop_mid_stream: float = Field(0.0, ge=0, le=1)
    malformed_sse: float = Field(0.0, ge=0, le=1)
    stall: float = Field(0.0, ge=0, le=1)
    mid_stream_error: float = Field(0.0, ge=0, le=1)

    fail_first_n: int = Field(0, ge=0, description="the first N generation requests get fail_first_kind")
    fail_first_kind: FaultKind = "server_error"
    retry_after_s: int = Field(1, ge=0, description="retry-after header on 429")
    stall_s: float = Field(2.0, ge=0)
    after_tokens: int = Field(3, ge=0, description="content tokens sent before a mid-stream fault strikes")
    malformed_then: Literal["continue", "close"] = "continue"

    @model_validator(mode="after")
    def _rates_fit(self) -> Faults:
        total = sum(getattr(self, kind) for kind in FAULT_KINDS)
        if total > 1.0 + 1e-9:
            raise ValueError(f"fault rates add up to {total:g}, more than 1")
        return self

    def rate(self, kind: str) -> float:
        rate: float = getattr(self, kind)
        return rate


class Nondeterminism(_Strict):
    """Concurrency-dependent output at temperature 0 (see nondeterminism.py).

    Each natural answer has `near_ties` positions where two tokens are nearly tied. With k requests
    batched together, each flips with probability base_flip_rate + (1 - base_flip_rate) *
    min(1, flip_rate_per_extra_request * (k - 1)); from the first flip on, the answer takes another
    deterministic continuation. With base_flip_rate 0 (the default), a request alone never flips.
    """

    flip_rate_per_extra_request: float = Field(0.0, ge=0, le=1, description="per near-tie, per other "
                                               "request in the batch")
    base_flip_rate: float = Field(0.0, ge=0, le=1, description="per near-tie at any batch size, alone too")
    near_ties: int = Field(8, ge=0, description="near-tie positions in each natural answer")


# Minimum cacheable prefix (tokens) per Anthropic model id; a key matches the model named exactly or
# followed by "-" (a dated id), the longest key wins. From the hosted-API fact sheet's table.
DEFAULT_MIN_CACHE_TOKENS: dict[str, int] = {
    "claude-opus-4-8": 4096, "claude-opus-4-7": 4096, "claude-opus-4-6": 4096, "claude-opus-4-5": 4096,
    "claude-haiku-4-5": 4096,
    "claude-fable-5": 2048, "claude-sonnet-4-6": 2048, "claude-3-5-haiku": 2048, "claude-3-haiku": 2048,
    "claude-sonnet-4-5": 1024, "claude-opus-4-1": 1024, "claude-sonnet-4": 1024, "claude-opus-4": 1024,
    "claude-3-7-sonnet": 1024,
}


class CacheScenario(_Strict):
    """Prompt caching: Anthropic breakpoints and OpenAI automatic caching (see caching.py)."""

    enabled: bool = Field(True, description="false: nothing is ever written or read (usage reports 0)")
    min_tokens: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_MIN_CACHE_TOKENS),
                                       description="Anthropic model -> minimum cacheable prefix; "
                                                   "entries given are merged over the defaults")
    default_min_tokens: int = Field(1024, ge=0, description="minimum for Anthropic models not in min_tokens")
    lookback_blocks: int = Field(20, ge=0, description="earlier block boundaries a breakpoint searches")
    time_scale: float = Field(1.0, gt=0, description="the cache clock runs this many times faster than "
                                                     "real time (so TTLs pass sooner)")
    openai_min_tokens: int = Field(1024, ge=1)
    openai_step_tokens: int = Field(128, ge=1)
    openai_ttl_s: float = Field(600.0, gt=0, description="idle lifetime of an OpenAI entry on the cache "
                                                         "clock; prompt_cache_retention 24h gives 24 h")

    @field_validator("min_tokens", mode="before")
    @classmethod
    def _over_defaults(cls, value: object) -> object:
        return {**DEFAULT_MIN_CACHE_TOKENS, **value} if isinstance(value, dict) else value


class SchemaOrderScenario(_Strict):
    """Accuracy that depends on a schema's property order (see schema_order.py): requests whose
    schema has a `label` property and whose user message is an item of `dataset` are answered
    with JSON, right with the accuracy of their variant (answer-first: `label` declared first;
    reasoning-first: something declared before it)."""

    answer_first_accuracy: float = Field(0.6, ge=0, le=1)
    reasoning_first_accuracy: float = Field(0.8, ge=0, le=1)
    correlation: float = Field(0.5, ge=0, le=1, description="correlation of the two variants' latent draws "
                               "per item: the share of items whose variants share one draw (1: as "
                               "concordant as the accuracies allow; 0: independent)")
    required_first: bool = Field(False, description="emit required keys before optional ones whatever "
                                 "their declared order, as llama.cpp's grammar does")
    dataset: str | None = Field(None, description="JSONL items to recognise; unset: the shipped dataset")


class PenaltyScenario(_Strict):
    """Penalty-induced corruption of the penalty probe's records task (see penalty.py): the right
    structural token or repeated key beats its near neighbour by a logit margin, and penalties on
    token counts flip the choice once their push exceeds it."""

    enabled: bool = True
    base_logit: float = Field(8.0, gt=0, description="logit of the near neighbour; the repetition penalty "
                              "divides positive logits, so it flips a choice when above 1 + margin / base_logit")
    key_margin: float = Field(3.0, gt=0, description="an expected key over its renamed variant")
    quote_margin: float = Field(30.0, gt=0, description="a double quote over a single one (unconstrained output)")
    close_margin: float = Field(8.0, gt=0, description="'}' over the end of the text (unconstrained output)")
    continue_margin: float = Field(12.0, gt=0, description="',' and the next record over closing the array early")
    optional_margin: float = Field(4.0, gt=0, description="a value for the optional field over null")
    value_margin: float = Field(6.0, gt=0, description="a non-empty string over an empty one (constrained output)")
    margin_jitter: float = Field(0.7, ge=0, lt=1, description="each decision's margin varies by up to this "
                                 "fraction, fixed by the prompt and the position")
    inject_when_omitted: dict[str, float] = Field(default_factory=dict, description="the gateway switch: "
                                                  "penalties applied to requests that omit them, e.g. "
                                                  "{ frequency_penalty = 0.5 }")


class GatewayScenario(_Strict):
    """What a gateway in front of the model does to requests (see gateway.py)."""

    volatile_system_prompt: bool = Field(False, description="stamp the time at the start of every "
                                         "system prompt, so prompt caching never hits")


class Scenario(_Strict):
    first_token_delay_ms: float = Field(20.0, ge=0, description="fixed delay before prefill, inside the slot")
    prefill_ms_per_token: float = Field(0.02, ge=0)
    decode_tokens_per_s: float = Field(200.0, gt=0)
    output_tokens: int = Field(64, ge=1, description="natural answer length when max_tokens allows it")
    slots: int = Field(8, ge=1, description="requests served at once; the rest queue FIFO")
    models: list[str] = Field(default_factory=lambda: ["emulator-1"], min_length=1,
                              description="listed by /v1/models; any name is accepted in requests")
    system_fingerprint: str | None = "fp_emulator"
    seed: int = 0
    cache_usage_fields: bool = Field(True, description="usage reports the cache (Anthropic cache_* fields, "
                                                       "OpenAI prompt_tokens_details); false: absent")
    server_timings: bool = Field(False, description="OpenAI route: report llama-server's `timings` object "
                                 "(prompt_ms: slot granted to first token, queueing excluded) on the last "
                                 "chunk, or the body's top level")
    faults: Faults = Field(default_factory=Faults)
    nondeterminism: Nondeterminism = Field(default_factory=Nondeterminism)
    cache: CacheScenario = Field(default_factory=CacheScenario)
    schema_order: SchemaOrderScenario = Field(default_factory=SchemaOrderScenario)
    penalty: PenaltyScenario = Field(default_factory=PenaltyScenario)
    gateway: GatewayScenario = Field(default_factory=GatewayScenario)


def load_scenario(path: str | os.PathLike[str] | None = None) -> Scenario:
    """The scenario in a TOML file, or the built-in defaults when `path` is None."""
    if path is None:
        return Scenario()
    raw = read_toml(path)
    try:
        return Scenario.model_validate(raw)
    except ValidationError as exc:
        raise validation_error(str(path), exc) from None
