"""Target adapters: the only code that opens sockets.

An adapter turns a protocol-neutral `ChatRequest` into the wire format of its protocol, sends it,
and returns an `Exchange` with timestamps taken on the way. It never raises for an endpoint
failure: a refused connection, a 429 or a garbled stream is an Exchange with `error_type` set.
"""

from __future__ import annotations

from prober.core.config import TargetConfig
from prober.targets.base import TargetAdapter


def make_adapter(target: TargetConfig, base_url: str, api_key: str | None) -> TargetAdapter:
    """Build the adapter for a target. `base_url` is passed separately because the emulator's
    address is only known once it has started."""
    if target.protocol == "anthropic":
        from prober.targets.anthropic import AnthropicAdapter
        return AnthropicAdapter(target, base_url, api_key)
    if target.protocol == "openai-responses":
        from prober.targets.responses import ResponsesAdapter
        return ResponsesAdapter(target, base_url, api_key)
    from prober.targets.openai import OpenAIAdapter
    return OpenAIAdapter(target, base_url, api_key)


__all__ = ["TargetAdapter", "make_adapter"]
