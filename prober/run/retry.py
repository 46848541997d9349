"""When to retry a failed attempt, and how long to wait first. Pure functions.

The official SDKs' own retries are off: the runner retries so that every attempt is counted and
stored (retries are data). Backoff is exponential with equal jitter: the wait is drawn uniformly
between half the exponential ceiling and the ceiling. Full jitter (0 to the ceiling) can draw a wait
near zero, and a retry sent at once to a rate-limited or overloaded endpoint is mostly another
failure to count; keeping half the ceiling guarantees each retry backs off, and the other half still
spreads concurrent retries apart. A server's retry-after (or retry-after-ms) wins when it is given
and not absurdly long.
"""

from __future__ import annotations

import random

from prober.core.records import Exchange

RETRYABLE = frozenset({"rate_limited", "overloaded", "server_error", "timeout", "connection", "protocol"})


def should_retry(exchange: Exchange, attempt: int, max_retries: int) -> bool:
    if exchange.error_type not in RETRYABLE or attempt > max_retries:
        return False
    # OpenAI's "insufficient_quota" 429 will not get better by waiting.
    if exchange.error_type == "rate_limited" and "insufficient_quota" in (exchange.error_message or ""):
        return False
    return exchange.response_headers.get("x-should-retry", "").lower() != "false"


def server_retry_after(headers: dict[str, str]) -> float | None:
    """Seconds the server asked us to wait, from retry-after-ms or retry-after; None if absent."""
    if "retry-after-ms" in headers:
        try:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    if "retry-after" in headers:
        try:
            return max(0.0, float(headers["retry-after"]))
        except ValueError:
            return None   # an HTTP date: rare on these APIs; fall back to backoff
    return None


def retry_delay(attempt: int, headers: dict[str, str], *, base: float, cap: float,
                retry_after_max: float, rng: random.Random | None = None) -> float | None:
    """Seconds to wait before attempt `attempt + 1`; None means do not retry (the server asked for
    longer than retry_after_max)."""
    asked = server_retry_after(headers)
    if asked is not None:
        return asked if asked <= retry_after_max else None
    ceiling = min(cap, base * (2 ** (attempt - 1)))
    # Equal jitter (module docstring): at least half the ceiling, never a retry at once.
    return (rng or random).uniform(ceiling / 2, ceiling)
