"""Concurrency-dependent nondeterminism at temperature 0.

A real server decodes greedily, yet a request's logits depend on what else is in its batch: the
kernels pick their reduction order from the batch shape, so the last bits of each logit move with
other people's traffic. Where two tokens are nearly tied, that flips the argmax, and from there the
answer takes another path and never rejoins the first.

The emulator models exactly that. Each natural answer has a fixed set of near-tie positions,
derived from the prompt. A request's batch size is k = min(requests in flight including itself,
slots), taken when it arrives: it joins the requests being served, or waits for a slot in a full
batch. Each near-tie the answer reaches flips with probability `flip_probability(k)`, drawn from an
RNG seeded by (scenario seed, request number); the first flip forks the answer into a continuation
that is a deterministic function of the prompt and the fork position, as the runner-up token would
be. With the default base_flip_rate of 0, a request alone (k = 1) never flips.

The ground truth of each request (in its record's `behaviours["nondeterminism"]`): batch_size,
near_ties reached, flip_probability, divergence_probability (the chance that its answer differs
from the answer of a request served alone) and forked_at_token (None when it did not fork).
"""

from __future__ import annotations

import hashlib
import random
from typing import TYPE_CHECKING

from prober.emulator.plan import GenRequest, ResponsePlan
from prober.emulator.scenario import Nondeterminism, Scenario
from prober.emulator.tokenizer import pseudo_text

if TYPE_CHECKING:
    from prober.emulator.behaviours import ServerState


def flip_probability(settings: Nondeterminism, batch_size: int) -> float:
    """The chance that one near-tie flips in a batch of `batch_size` requests."""
    load = min(1.0, settings.flip_rate_per_extra_request * max(batch_size - 1, 0))
    return settings.base_flip_rate + (1.0 - settings.base_flip_rate) * load


def divergence_probability(settings: Nondeterminism, batch_size: int, near_ties: int) -> float:
    """The chance that an answer reaching `near_ties` near-ties differs from the unflipped answer."""
    return 1.0 - (1.0 - flip_probability(settings, batch_size)) ** near_ties


def near_tie_positions(prompt: str, n_tokens: int, count: int, seed: int) -> list[int]:
    """`count` distinct token positions of the natural answer, in order; never its final token."""
    candidates = max(n_tokens - 1, 0)
    digest = hashlib.sha256(f"near-ties\x00{seed}\x00{prompt}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:16], "big"))
    return sorted(rng.sample(range(candidates), min(count, candidates)))


def forked_tokens(prompt: str, tokens: list[str], at: int, natural_length: int, seed: int) -> list[str]:
    """`tokens` with everything from position `at` replaced by the continuation the runner-up
    token at `at` leads to. The token at `at` always changes; the length stays the same."""
    rest = pseudo_text(f"{prompt}\x00fork\x00{at}", max(natural_length - at, 1), seed)[:len(tokens) - at]
    first = rest[0] if at == 0 else " " + rest[0].lower()
    if first == tokens[at]:
        first += "n"
    return tokens[:at] + [first, *rest[1:]]


class ConcurrencyNondeterminism:
    def __init__(self, scenario: Scenario) -> None:
        self.settings = scenario.nondeterminism
        self.slots = scenario.slots
        self.seed = scenario.seed
        self.natural_length = scenario.output_tokens
        self.enabled = self.settings.near_ties > 0 and (
            self.settings.flip_rate_per_extra_request > 0 or self.settings.base_flip_rate > 0)

    def apply(self, request: GenRequest, plan: ResponsePlan, state: ServerState) -> None:
        if not self.enabled:
            return
        batch_size = min(state.in_flight + 1, self.slots)
        prompt = request.prompt_text
        ties = [p for p in near_tie_positions(prompt, self.natural_length, self.settings.near_ties, self.seed)
                if p < len(plan.tokens)]
        flip = flip_probability(self.settings, batch_size)
        rng = random.Random(f"nondeterminism:{self.seed}:{state.seq}")
        forked_at = next((p for p in ties if rng.random() < flip), None)
        if forked_at is not None:
            plan.tokens = forked_tokens(prompt, plan.tokens, forked_at, self.natural_length, self.seed)
        plan.truth["nondeterminism"] = {
            "batch_size": batch_size,
            "near_ties": len(ties),
            "flip_probability": flip,
            "divergence_probability": divergence_probability(self.settings, batch_size, len(ties)),
            "forked_at_token": forked_at,
        }
