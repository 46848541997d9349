"""The interface every protocol adapter implements."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from typing import ClassVar

from prober.core.config import TargetConfig
from prober.core.records import ChatRequest, Exchange, Protocol


class TargetAdapter(abc.ABC):
    protocol: ClassVar[Protocol]
    # True when `send` takes `not_before_ns` (perf_counter_ns): the request is prepared at once and
    # written at that moment, never earlier. An open loop then starts a request a little ahead of
    # its due time (prober/run/session.py); for an adapter without it, the loop starts it when due.
    writes_on_schedule: ClassVar[bool] = False

    def __init__(self, target: TargetConfig, base_url: str, api_key: str | None) -> None:
        self.target = target
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key   # never copied into an Exchange, a log line or an error message

    @abc.abstractmethod
    async def send(self, request: ChatRequest, attempt: int = 1,
                   before_resend: Callable[[Exchange], Awaitable[None]] | None = None) -> Exchange:
        """Send one request; return what happened. Never raises for endpoint failures. Where the
        adapter resends a refused request in a changed shape, it awaits `before_resend(refused)`
        first: every attempt on the wire is an Exchange the caller can store and charge."""

    async def count_tokens(self, request: ChatRequest) -> int | None:
        """Input tokens of a request, where the endpoint can count them; None otherwise."""
        return None

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close pooled connections."""
