"""A per-run budget of requests and tokens, shared by every target and probe of the run."""

from __future__ import annotations

from prober.config import Budget
from prober.records import Exchange


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
        self.tokens += reported_tokens(exchange.usage)


def reported_tokens(usage: dict | None) -> int:
    """Input plus output tokens as reported, across both protocols' field names."""
    if not usage:
        return 0
    keys = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        keys = ("prompt_tokens", "completion_tokens")
    return sum(v for k in keys if isinstance(v := usage.get(k), int))
