"""A per-run budget of requests and tokens, shared by every target and probe of the run."""

from __future__ import annotations

from typing import Any

from prober.core.config import Budget
from prober.core.records import Exchange


class BudgetExhausted(Exception):
    """Raised to a probe when the next request would exceed the run's budget."""


class RunBudget:
    def __init__(self, limits: Budget) -> None:
        self.limits = limits
        self.requests = 0
        self.tokens = 0
        self.exhausted_reason: str | None = None

    def reserve_request(self) -> None:
        """Count one attempt, or raise if the budget is spent."""
        if self.exhausted_reason is None:
            if self.limits.max_requests is not None and self.requests >= self.limits.max_requests:
                self.exhausted_reason = f"max_requests={self.limits.max_requests} reached"
            elif self.limits.max_tokens is not None and self.tokens >= self.limits.max_tokens:
                self.exhausted_reason = f"max_tokens={self.limits.max_tokens} reached ({self.tokens} used)"
        if self.exhausted_reason is not None:
            raise BudgetExhausted(self.exhausted_reason)
        self.requests += 1

    def record(self, exchange: Exchange) -> None:
        tokens, unreadable = reported_tokens(exchange.usage)
        self.tokens += tokens
        # Not a silent 0: the sample says which count the budget could not charge.
        exchange.findings.extend(f"usage.{key} = {value!r} is not a token count: not charged to the budget"
                                 for key, value in unreadable)


_INPUT_OUTPUT = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
_PROMPT_COMPLETION = ("prompt_tokens", "completion_tokens")


def reported_tokens(usage: dict[str, Any] | None) -> tuple[int, list[tuple[str, object]]]:
    """Input plus output tokens as reported, across both protocols' field names; and the fields
    present that are no count. A count sent as "20" or 20.0 is charged as 20 (that is what the
    endpoint bills; the conformance check reports the type); true, 2.5 or "many" are returned as
    unreadable. Absent and null fields are neither."""
    if not usage:
        return 0, []
    keys: tuple[str, ...] = _INPUT_OUTPUT
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        keys = _PROMPT_COMPLETION
    total = 0
    unreadable: list[tuple[str, object]] = []
    for key in keys:
        value = usage.get(key)
        if value is None:
            continue
        count = token_count(value)
        if count is None:
            unreadable.append((key, value))
        else:
            total += count
    return total, unreadable


def token_count(value: object) -> int | None:
    """A non-negative whole number of tokens however it was spelled (7, 7.0, "7"); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        count = value
    elif (isinstance(value, float) and value.is_integer()) or (isinstance(value, str) and value.strip().isdigit()):
        count = int(value)
    else:
        return None
    return count if count >= 0 else None
