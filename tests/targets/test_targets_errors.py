"""prober.targets.errors.classify_error: statuses, error bodies and exceptions -> error types."""

from __future__ import annotations

import json
import ssl

import pytest

from prober.core.records import ERROR_TYPES
from prober.targets.adapter import mentioned_param
from prober.targets.errors import classify_error
from prober.targets.transport import TransportError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("status,expected", [
    (429, "rate_limited"), (529, "overloaded"), (503, "overloaded"), (500, "server_error"),
    (502, "server_error"), (504, "server_error"), (401, "auth"), (403, "auth"), (400, "bad_request"),
    (404, "bad_request"), (413, "bad_request"), (422, "bad_request"), (402, "bad_request"),
    (302, "protocol")])
def test_status(status, expected):
    kind, message = classify_error(status, {"error": {"type": "x", "message": "why"}})
    assert kind == expected and kind in ERROR_TYPES
    assert message == f"{status} x: why"


@pytest.mark.parametrize("body,expected", [
    ({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "overloaded"),
    ({"type": "error", "error": {"type": "rate_limit_error", "message": ""}}, "rate_limited"),
    ({"type": "error", "error": {"type": "api_error", "message": "x"}}, "server_error"),
    ({"type": "error", "error": {"type": "invalid_request_error", "message": "x"}}, "bad_request"),
    ({"error": {"message": "x", "type": "server_error", "code": None}}, "server_error"),
    ({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}, "overloaded"),
    ({"error": {"code": 429, "message": "busy", "type": "mystery"}}, "rate_limited"),
    ({"error": {"message": "x", "type": "mystery", "code": "rate_limit_exceeded"}}, "rate_limited"),
    ({"error": "plain string"}, "server_error"),
    ({"something": "else"}, "server_error"),
])
def test_error_after_200_by_body_type(body, expected):
    assert classify_error(200, body)[0] == expected


@pytest.mark.parametrize("exc,expected", [
    (TransportError("timeout", "read timeout"), "timeout"),
    (TransportError("connection", "reset"), "connection"),
    (TransportError("protocol", "bad chunk"), "protocol"),
    (TimeoutError(), "timeout"),
    (ConnectionResetError(104, "Connection reset by peer"), "connection"),
    (ConnectionRefusedError(111, "Connection refused"), "connection"),
    (ssl.SSLError("bad"), "connection"),
    (json.JSONDecodeError("Expecting value", "x", 0), "protocol"),
    (KeyError("choices"), "internal"),   # decoders check shapes: an escaped exception is our bug
])
def test_exceptions(exc, expected):
    kind, message = classify_error(exc=exc)
    assert kind == expected and message


def test_message_is_bounded_and_text_bodies_are_used():
    kind, message = classify_error(500, "<html>" + "x" * 5000)
    assert kind == "server_error" and message.startswith("500: <html>") and len(message) <= 500


def test_mentioned_param_picks_the_first_named_sampling_field():
    names = {"temperature": "temperature", "top_p": "top_p", "stop_sequences": "stop", "stop": "stop"}
    assert mentioned_param("temperature: Input should be less than or equal to 1", names) == "temperature"
    assert mentioned_param("`temperature` and `top_p` cannot both be specified", names) == "temperature"
    assert mentioned_param("stop_sequences: Extra inputs are not permitted", names) == "stop"
    assert mentioned_param("top_probability is unknown", names) is None
    assert mentioned_param("messages: too long", names) is None
