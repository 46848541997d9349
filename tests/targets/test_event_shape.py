"""The conformance check validates each shape of event once (prober/targets/event_shape.py). Its
verdicts must be the ones validating every event gives: recorded streams, with one delta's string
replaced by each of a set of hostile values in turn, get the same findings with shapes as with
every event validated (event_shape patched to give no shape)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from prober.core.records import Exchange
from prober.targets import conformance
from prober.targets.conformance import check_exchange
from prober.targets.event_shape import event_shape
from tests.targets.test_targets_samples import INCLUDE_USAGE, _events, decode, http_body

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

# Raw JSON text put where a delta's string was, between its quotes (or in place of the quotes).
VALUES = [
    '"plain words"', '""', r'"with \"quotes\""', r'"back\\slash"', r'"\n\t\r\b\f\/"',
    r'"\u00e9\u4e2d"', r'"\ud83d\ude00"', '"é中😀 raw"', '"\x7f"',
    r'"\ud800"', r'"\udc00x"', r'"\q"', '"\x01"', '"ends in a backslash\\"',
    r'"\",\"content\":\"x"', r'"\",\"text\":\"x"', '"x","content":"y"', '"x","text":"y"',
    '7', 'null', '["a"]', '{"a":1}', 'true',
]

STREAMS = [
    ("openai", lambda: _wire("openai-chat-stream-include-usage.sse")),
    ("anthropic", lambda: _wire("anthropic-messages-stream-basic.sse")),
    ("anthropic", lambda: _wire("anthropic-messages-stream-tool-use.sse")),
    ("openai", lambda: http_body("openai-stream-include-usage.http")[1]),
    ("anthropic", lambda: http_body("anthropic-stream.http")[1]),
]
KEY = {"openai": "content", "anthropic": "text"}


def _wire(name: str) -> bytes:
    out = b""
    for event, data in _events(name):
        out += (f"event: {event}\n" if event else "").encode() + f"data: {data}\n\n".encode()
    return out


def _exchange(protocol: str, raw_events: list[tuple[str | None, str]]) -> Exchange:
    ex = decode(protocol, b"", 4096, INCLUDE_USAGE)
    ex.error_type = None
    ex.raw_events = list(raw_events)
    return ex


def _with_value(text: str, key: str, value: str) -> str | None:
    """`text` with its first `"<key>":"..."` string replaced by the raw JSON `value`."""
    shape = event_shape(text, key)
    if shape is None:
        return None
    prefix, suffix = shape
    return prefix[:-1] + value + suffix[1:]


def _every_event_validated(ex: Exchange, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    with monkeypatch.context() as patch:
        patch.setattr(conformance, "event_shape", lambda text, key: None)
        return check_exchange(ex)


@pytest.mark.parametrize("protocol,load", STREAMS, ids=[f"{p}-{i}" for i, (p, _) in enumerate(STREAMS)])
def test_same_findings_as_validating_every_event(protocol, load, monkeypatch):
    raw_events = decode(protocol, load(), 4096, INCLUDE_USAGE).raw_events
    key = KEY[protocol]
    positions = [i for i, (_, text) in enumerate(raw_events) if event_shape(text, key) is not None]
    assert len(positions) >= 3, "the stream has deltas to vary"
    compared = found = 0
    for position in positions:
        for value in VALUES:
            changed = _with_value(raw_events[position][1], key, value)
            assert changed is not None
            ex = _exchange(protocol, raw_events[:position] + [(raw_events[position][0], changed)]
                           + raw_events[position + 1:])
            expected = _every_event_validated(ex, monkeypatch)
            assert check_exchange(ex) == expected, (position, value)
            compared += 1
            found += bool(expected)
    # Both verdicts occur: the hostile values are found, the harmless ones are not.
    assert 0 < found < compared


def test_a_stream_of_deltas_is_validated_once_per_shape(monkeypatch):
    raw_events = decode("openai", http_body("openai-stream-include-usage.http")[1], 4096, INCLUDE_USAGE).raw_events
    validated: list[str] = []
    original = BaseModel.model_validate_json.__func__  # type: ignore[attr-defined]

    def counting(cls, text, **kwargs):
        validated.append(text)
        return original(cls, text, **kwargs)

    monkeypatch.setattr(BaseModel, "model_validate_json", classmethod(counting))
    assert check_exchange(_exchange("openai", raw_events)) == []
    deltas = sum(event_shape(text, "content") is not None for _, text in raw_events)
    assert deltas >= 15
    # The role chunk, one content delta, the finish chunk and the usage chunk have shapes of their own.
    assert len(validated) <= 5 < deltas


@pytest.mark.parametrize("text,shape", [
    ('{"a":1,"content":"hi","b":2}', ('{"a":1,"content":"', '","b":2}')),
    ('{"content":"","b":2}', ('{"content":"', '","b":2}')),
    (r'{"content":"x\"y","b":2}', ('{"content":"', '","b":2}')),
    (r'{"content":"\u00e9"}', ('{"content":"', '"}')),
    ('{"b":"content","content":"x"}', ('{"b":"content","content":"', '"}')),
    (r'{"b":"a\"content\":\"x","content":"y"}', (r'{"b":"a\"content\":\"x","content":"', '"}')),
    (r'{"my\"content":"x","content":"y"}', None),   # the first occurrence decides: inside a key
    ('{ "content":"x"}', None),                       # only compact JSON: after { or , directly
    ('{"content":7}', None),
    (r'{"content":"\ud83d\ude00"}', None),
    (r'{"content":"\q"}', None),
    ('{"content":"\x1f"}', None),
    ('{"content":"unterminated', None),
    ('"content":"x"', None),
])
def test_event_shape(text, shape):
    assert event_shape(text, "content") == shape
