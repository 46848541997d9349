"""The behaviour pipeline: each behaviour adjusts the response plan of one request.

A behaviour sees the neutral request, the plan built so far and a snapshot of the server state
taken when the request arrived, and changes the plan in place. The chain runs once per generation
request, in order, before the request queues for a slot; the engine then times the plan and a wire
encoder renders it. New emulated effects (prompt caching, concurrency-dependent output, penalty
corruption) are new behaviours appended to the chain, with any state of their own kept on the
behaviour object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from prober.emulator.caching import PromptCache
from prober.emulator.faults import FaultInjection
from prober.emulator.nondeterminism import ConcurrencyNondeterminism
from prober.emulator.penalty import PenaltyEffect
from prober.emulator.plan import GenRequest, ResponsePlan
from prober.emulator.scenario import Scenario
from prober.emulator.schema_order import SchemaOrderEffect
from prober.emulator.structured import StructuredAnswer
from prober.emulator.tokenizer import pseudo_text
from prober.emulator.tool_calls import ForcedToolCall


@dataclass(frozen=True)
class ServerState:
    """The server as the request found it."""

    seq: int          # this request's number among generation requests since start or reset, from 0
    in_flight: int    # other generation requests arrived and not finished (queued or holding a slot)
    active: int       # requests holding a slot
    queued: int       # requests waiting for a slot


class Behaviour(Protocol):
    def apply(self, request: GenRequest, plan: ResponsePlan, state: ServerState) -> None: ...


class NaturalText:
    """Deterministic pseudo-words from the prompt, cut at max_tokens."""

    def __init__(self, scenario: Scenario) -> None:
        self.length = scenario.output_tokens
        self.seed = scenario.seed

    def apply(self, request: GenRequest, plan: ResponsePlan, state: ServerState) -> None:
        plan.answer(pseudo_text(request.prompt_text, self.length, self.seed), request.max_tokens)


class UsageReport:
    """Usage as counted by the emulator's tokenizer; cache fields zero (PromptCache fills them) or absent."""

    def __init__(self, scenario: Scenario) -> None:
        self.cache_fields = scenario.cache_usage_fields

    def apply(self, request: GenRequest, plan: ResponsePlan, state: ServerState) -> None:
        plan.usage.input_tokens = request.input_tokens
        plan.usage.output_tokens = len(plan.tokens)
        cached = 0 if self.cache_fields else None
        plan.usage.cache_read_tokens = cached
        plan.usage.cache_write_tokens = cached


class Timing:
    """First-token delay, prefill proportional to the input tokens not read from a cache, a fixed decode rate."""

    def __init__(self, scenario: Scenario) -> None:
        self.first_token_delay_s = scenario.first_token_delay_ms / 1000
        self.prefill_s_per_token = scenario.prefill_ms_per_token / 1000
        self.token_interval_s = 1 / scenario.decode_tokens_per_s
        self.server_timings = scenario.server_timings

    def apply(self, request: GenRequest, plan: ResponsePlan, state: ServerState) -> None:
        plan.server_timings = self.server_timings
        plan.first_token_delay_s = self.first_token_delay_s
        plan.prefill_s = self.prefill_s_per_token * (request.input_tokens - plan.cached_prompt_tokens)
        plan.token_interval_s = self.token_interval_s


class SystemFingerprint:
    def __init__(self, scenario: Scenario) -> None:
        self.fingerprint = scenario.system_fingerprint

    def apply(self, request: GenRequest, plan: ResponsePlan, state: ServerState) -> None:
        plan.system_fingerprint = self.fingerprint


class Pipeline:
    def __init__(self, behaviours: list[Behaviour]) -> None:
        self.behaviours = list(behaviours)

    def plan(self, request: GenRequest, state: ServerState) -> ResponsePlan:
        plan = ResponsePlan()
        for behaviour in self.behaviours:
            behaviour.apply(request, plan, state)
        return plan

    def reset(self) -> None:
        """Forget what behaviours remember between requests (those with a `reset` method: the cache)."""
        for behaviour in self.behaviours:
            reset = getattr(behaviour, "reset", None)
            if reset is not None:
                reset()


def base_behaviours(scenario: Scenario) -> list[Behaviour]:
    """The chain every scenario gets: text, nondeterminism, schema-order answers, penalty-corrupted
    records, a call of any other forced tool, JSON for any other JSON request, usage, prompt cache,
    timing, fingerprint, faults."""
    return [NaturalText(scenario), ConcurrencyNondeterminism(scenario), SchemaOrderEffect(scenario),
            PenaltyEffect(scenario), ForcedToolCall(scenario), StructuredAnswer(scenario), UsageReport(scenario),
            PromptCache(scenario),
            Timing(scenario), SystemFingerprint(scenario), FaultInjection(scenario)]
