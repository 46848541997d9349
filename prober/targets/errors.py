"""Failed requests -> the error types of records.ERROR_TYPES, in one place."""

from __future__ import annotations

import json
import ssl
from typing import Any

from prober.targets.transport import TransportError

_MESSAGE_LIMIT = 500

# Error `type` strings seen in error bodies and in error events after HTTP 200 (Anthropic
# `event: error`, OpenAI `data: {"error": ...}`, llama-server and vLLM bodies).
_BODY_TYPES = {
    "overloaded_error": "overloaded",
    "unavailable_error": "overloaded",
    "server_is_overloaded": "overloaded",
    "rate_limit_error": "rate_limited",
    "rate_limit_exceeded": "rate_limited",
    "insufficient_quota": "rate_limited",
    "slow_down": "rate_limited",
    "authentication_error": "auth",
    "permission_error": "auth",
    "invalid_request_error": "bad_request",
    "not_found_error": "bad_request",
    "request_too_large": "bad_request",
    "exceed_context_size_error": "bad_request",
    "not_supported_error": "bad_request",
    "billing_error": "bad_request",
    "api_error": "server_error",
    "server_error": "server_error",
    "timeout_error": "server_error",     # the server's own timeout (504), not ours
}


def _from_status(status: int) -> str:
    if status == 429:
        return "rate_limited"
    if status in (503, 529):
        return "overloaded"
    if status >= 500:
        return "server_error"
    if status in (401, 403):
        return "auth"
    if status >= 400:
        return "bad_request"
    return "protocol"                    # a redirect or other status we do not follow


def error_details(body: Any) -> tuple[str | None, str | None, Any]:
    """(type, message, code) from an error body in either protocol's shape, as far as present."""
    if not isinstance(body, dict):
        return None, None, None
    error = body.get("error")
    if isinstance(error, dict):
        kind = error.get("type")
        message = error.get("message")
        code = error.get("code")
        return (kind if isinstance(kind, str) else None,
                message if isinstance(message, str) else None, code)
    if isinstance(error, str):
        return None, error, None
    # No nested error object: llama-server's `{"code":503,"message":...,"type":"unavailable_error"}`
    # (its stream error events too), gateways and FastAPI-style bodies. Anthropic's envelope
    # `"type": "error"` names no class.
    message = body.get("message") or body.get("detail")
    kind = body.get("type")
    return (kind if isinstance(kind, str) and kind != "error" else None,
            message if isinstance(message, str) else None, body.get("code"))


def is_error_body(body: Any) -> bool:
    """Whether a JSON body answered with a 2xx status is an error object rather than a Message or
    a ChatCompletion: an `error` member (OpenAI, and Anthropic's `"type": "error"` envelope), or a
    bare error (a `message` with a `code` or `type`) with neither `content` nor `choices`."""
    if not isinstance(body, dict):
        return False
    if body.get("type") == "error" or body.get("error") is not None:
        return True
    return (isinstance(body.get("message"), str) and ("code" in body or "type" in body)
            and "content" not in body and "choices" not in body)


def classify_error(status: int | None = None, body: Any = None,
                   exc: BaseException | None = None) -> tuple[str, str]:
    """The error type and a short message for a failure.

    - `exc`: a transport or parsing exception (timeouts, refused/reset connections, bad JSON);
    - `status` >= 300: the HTTP status decides, the body supplies the message;
    - `status` 200 or None with an error `body`: an error event after the stream started; the
      error's `type` decides (`overloaded_error` -> overloaded), then a numeric `code`, else
      server_error.
    """
    if exc is not None:
        return _classify_exception(exc)
    kind, message, code = error_details(body)
    if message is None and isinstance(body, (str, bytes)):
        message = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    parts = [str(status)] if status and status >= 300 else []
    if kind:
        parts.append(kind)
    text = " ".join(parts)
    if message:
        text = f"{text}: {message}" if text else message
    text = text[:_MESSAGE_LIMIT] or "error"
    if status is not None and status >= 300:
        return _from_status(status), text
    if kind in _BODY_TYPES:
        return _BODY_TYPES[kind], text
    if isinstance(code, int) and 400 <= code < 600:
        return _from_status(code), text
    if isinstance(code, str) and code in _BODY_TYPES:
        return _BODY_TYPES[code], text
    return "server_error", text


def _classify_exception(exc: BaseException) -> tuple[str, str]:
    message = str(exc)[:_MESSAGE_LIMIT] or type(exc).__name__
    if isinstance(exc, TransportError):
        return exc.kind, message
    if isinstance(exc, TimeoutError):            # asyncio.TimeoutError is the same class
        return "timeout", message
    if isinstance(exc, (ssl.SSLError, ConnectionError, OSError)):
        return "connection", f"{type(exc).__name__}: {message}"
    if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
        return "protocol", f"undecodable JSON: {message}"
    # Anything else escaped prober's own code: decoders check shapes and values and record what is
    # wrong as a protocol error, so an exception here is a bug of ours, never the endpoint's fault
    # (and not retried as if it were: records.ERROR_TYPES, retry.RETRYABLE).
    return "internal", f"{type(exc).__name__}: {message}"
