"""prober.targets.sse: the incremental SSE parser, with canned inputs split every possible way."""

from __future__ import annotations

import pytest

from prober.targets.sse import SSEParser
from tests.support.scripted_server import WIRE_SAMPLES

pytestmark = pytest.mark.unit


def parse(*chunks: bytes) -> list[tuple[str | None, str]]:
    parser = SSEParser()
    events = []
    for chunk in chunks:
        events += parser.feed(chunk)
    return events


STREAM = (b": hello\n"
          b"event: message_start\ndata: {\"a\": 1}\n\n"
          b"data: line one\ndata: line two\n\n"
          b"event: ping\ndata: {}\n\n"
          b":\n\n"
          b"event: brand_new_type\ndata:no-space\n\n"
          b"data: [DONE]\n\n")
EXPECTED = [("message_start", '{"a": 1}'), (None, "line one\nline two"), ("ping", "{}"),
            ("brand_new_type", "no-space"), (None, "[DONE]")]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_line_endings(newline):
    assert parse(STREAM.replace(b"\n", newline)) == EXPECTED


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
def test_every_split_point(newline):
    raw = STREAM.replace(b"\n", newline)
    for cut in range(len(raw) + 1):
        assert parse(raw[:cut], raw[cut:]) == EXPECTED, cut


def test_byte_by_byte_and_crlf_split_between_cr_and_lf():
    raw = STREAM.replace(b"\n", b"\r\n")
    assert parse(*(raw[i:i + 1] for i in range(len(raw)))) == EXPECTED


def test_comments_are_counted_not_returned():
    parser = SSEParser()
    assert parser.feed(b": ping\n\n:\n\n: keep-alive\n\n") == []
    assert parser.comments == 3


def test_event_without_data_is_not_dispatched_and_name_resets():
    assert parse(b"event: lonely\n\ndata: x\n\n") == [(None, "x")]


def test_empty_data_line_dispatches_empty_string():
    assert parse(b"data\n\n", b"data:\n\n") == [(None, ""), (None, "")]


def test_unknown_fields_id_and_retry():
    parser = SSEParser()
    assert parser.feed(b"id: 7\nretry: 1500\nfoo: bar\ndata: x\n\n") == [(None, "x")]
    assert parser.last_event_id == "7" and parser.retry_ms == 1500


def test_byte_order_mark_split_across_chunks():
    assert parse(b"\xef\xbb", b"\xbfdata: x\n\n") == [(None, "x")]


def test_utf8_split_inside_a_character():
    raw = "data: héllo ✓\n\n".encode()
    for cut in range(len(raw)):
        assert parse(raw[:cut], raw[cut:]) == [(None, "héllo ✓")]


def test_pending_reports_a_cut_event():
    parser = SSEParser()
    parser.feed(b"data: complete\n\n")
    assert not parser.pending
    parser.feed(b"data: {\"half")
    assert parser.pending
    parser = SSEParser()
    parser.feed(b"event: x\ndata: y\n")
    assert parser.pending


def test_wire_samples_event_counts():
    for name, count in [("anthropic-messages-stream-basic.sse", 9),
                        ("anthropic-messages-stream-tool-use.sse", 15),
                        ("openai-chat-stream-include-usage.sse", 34)]:
        raw = (WIRE_SAMPLES / name).read_bytes()
        assert len(parse(raw)) == count, name
        # arbitrary network splits give the same events
        assert parse(*(raw[i:i + 13] for i in range(0, len(raw), 13))) == parse(raw)
