"""Conformance of a completed Exchange against the official SDKs' pydantic types (Anthropic
Messages, OpenAI Chat Completions and OpenAI Responses).

Off the timing path: the adapter keeps every event's data text (or the body text) in
`exchange.raw_events`, and the runner calls `check_exchange` after the exchange completed. Each
event (or the body) is validated against the SDK type for its `type` (Anthropic) or against
ChatCompletionChunk / ChatCompletion (OpenAI): first with `model_validate_json` straight from the
text (the fast path for the conforming majority; a stream's deltas differ only in their piece of
output, so each shape of event is validated once: event_shape.py), and only when that fails parsed
with json and validated again to say what is wrong. Protocol-level checks cover event order, the
terminal event and the usage chunk. Findings are short strings such as
"anthropic content_block_delta #3: delta.text: Input should be a valid string", where #3 is the
event's position in `raw_events`.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

from pydantic import BaseModel, ValidationError

from prober.core.records import Exchange
from prober.targets.errors import is_error_body
from prober.targets.event_shape import event_shape

_MAX_FINDINGS = 50
_ERRORS_PER_EVENT = 3


@cache
def _anthropic_models() -> dict[str, type[BaseModel]]:
    from anthropic import types as t
    return {
        "message_start": t.RawMessageStartEvent,
        "message_delta": t.RawMessageDeltaEvent,
        "message_stop": t.RawMessageStopEvent,
        "content_block_start": t.RawContentBlockStartEvent,
        "content_block_delta": t.RawContentBlockDeltaEvent,
        "content_block_stop": t.RawContentBlockStopEvent,
        "error": t.ErrorResponse,
        "message": t.Message,
    }


@cache
def _openai_models() -> dict[str, type[BaseModel]]:
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    return {"chunk": ChatCompletionChunk, "completion": ChatCompletion}


def _is_branch(part: Any) -> bool:
    """A union member's name in a pydantic error location (a model class or a tagged type),
    as opposed to a field name (the APIs use snake_case) or a list index."""
    return isinstance(part, str) and (part[:1].isupper() or "[" in part or "-" in part)


def _format_errors(exc: ValidationError) -> list[str]:
    """Validation errors as "loc: message", keeping only the union member the data claimed to be:
    a member whose own `type` literal did not match is not what the sender meant."""
    errors = exc.errors(include_url=False)
    rejected_branches = set()
    for error in errors:
        loc = error["loc"]
        if error["type"] == "literal_error" and loc and loc[-1] == "type" and len(loc) >= 2 \
                and _is_branch(loc[-2]):
            rejected_branches.add(loc[:-1])
    lines: list[str] = []
    unmatched: dict[tuple[Any, ...], Any] = {}
    for error in errors:
        loc = error["loc"]
        if any(loc[:i] in rejected_branches for i in range(1, len(loc))):
            if error["type"] == "literal_error" and loc[-1] == "type":
                field = tuple(p for p in loc[:-2] if not _is_branch(p)) + ("type",)
                unmatched.setdefault(field, error.get("input"))
            continue
        lines.append(f"{_path(loc)}: {error['msg']}")
    # Every member rejected the discriminator: the value itself is unknown.
    for field, value in unmatched.items():
        if not any(line.startswith(_path(field[:-1])) for line in lines):
            lines.append(f"{_path(field)}: unknown value {value!r}")
    unique = list(dict.fromkeys(lines))
    return unique[:_ERRORS_PER_EVENT]


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if _is_branch(part):
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(root)"


def _validate(model: type[BaseModel], text: str, label: str, findings: list[str]) -> None:
    """Strictly, from the JSON text: the SDKs parse laxly (`"prompt_tokens": "20"`, `3.0` and `true`
    all become integers there), but a field the SDK types as an integer must be one on the wire."""
    try:
        model.model_validate_json(text, strict=True)
    except ValidationError as exc:
        findings.extend(f"{label}: {line}" for line in _format_errors(exc))


def check_exchange(exchange: Exchange) -> list[str]:
    """Findings for one completed exchange; an empty list when everything conforms. Never raises."""
    try:
        if not exchange.raw_events:
            return []
        if exchange.protocol == "anthropic":
            findings = _check_anthropic(exchange)
        elif exchange.protocol == "openai-responses":
            findings = _check_responses(exchange)
        else:
            findings = _check_openai(exchange)
    except Exception as exc:   # a checker bug must not cost the sample
        return [f"conformance check failed: {type(exc).__name__}: {exc}"]
    if len(findings) > _MAX_FINDINGS:
        findings = findings[:_MAX_FINDINGS] + [f"... and {len(findings) - _MAX_FINDINGS} more"]
    return findings


class _NotJSON:
    """A payload that did not parse as JSON (the adapter already made it a protocol error)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _load(data: Any) -> Any:
    if not isinstance(data, str) or data == "[DONE]":
        return data
    try:
        return json.loads(data)
    except ValueError:
        return _NotJSON(data)


def _cut_by_transport(exchange: Exchange) -> bool:
    return exchange.error_type in ("timeout", "connection")


def _is_stream(exchange: Exchange) -> bool:
    """Whether the body was an event stream: the same test the adapter made on content-type."""
    return exchange.stream and "event-stream" in exchange.response_headers.get("content-type",
                                                                              "event-stream")


_ANTHROPIC_EVENTS = frozenset({"message_start", "message_delta", "message_stop", "content_block_start",
                               "content_block_delta", "content_block_stop", "error"})


class _Conforming:
    """Which of one stream's events conform, each validated once per shape (event_shape.py): an
    event with the shape of one that conformed gets that event's instance, which differs from
    its own only in the streamed string at `key`, a field no check here reads. One per exchange."""

    def __init__(self, key: str) -> None:
        self._key = key
        self._conformed: dict[tuple[type[BaseModel], tuple[str, str]], BaseModel] = {}

    def __call__(self, model: type[BaseModel], text: Any) -> BaseModel | None:
        """The validated instance when `text` conforms: pydantic parses the JSON itself, about
        twice as fast as json.loads plus model_validate. None sends the event down the detailed path."""
        if type(text) is not str:
            return None
        shape = event_shape(text, self._key)
        if shape is not None and (known := self._conformed.get((model, shape))) is not None:
            return known
        try:
            instance = model.model_validate_json(text, strict=True)
        except ValidationError:
            return None
        if shape is not None:
            self._conformed[(model, shape)] = instance
        return instance


def _check_body(exchange: Exchange, label: str, is_error: Callable[[Any], bool],
                check_error: Callable[[str, Any, str, list[str]], None],
                check_ok: Callable[[str, list[str]], None]) -> list[str] | None:
    """The findings of a response that is one body (an HTTP error, a non-streamed answer, a 200
    whose body is an error object), the same for every protocol; None for a stream."""
    status = exchange.status or 0
    if 200 <= status < 300 and _is_stream(exchange):
        return None
    findings: list[str] = []
    text = exchange.raw_events[0][1]
    body = _load(text)
    if isinstance(body, _NotJSON):
        return [f"{label} body (HTTP {status}): not JSON: {body.text[:80]!r}"]
    if not 200 <= status < 300 or is_error(body):
        check_error(text, body, f"{label} error body (HTTP {status})", findings)
    else:
        check_ok(text, findings)
    return findings


def _check_anthropic(exchange: Exchange) -> list[str]:
    models = _anthropic_models()
    body_findings = _check_body(
        exchange, "anthropic", is_error_body,
        lambda text, _body, where, found: _validate(models["error"], text, where, found),
        lambda text, found: _validate(models["message"], text, "anthropic message", found))
    if body_findings is not None:
        return body_findings
    findings: list[str] = []
    open_blocks: set[Any] = set()
    seen_start = seen_stop = seen_error = False
    conforming = _Conforming("text")
    for position, (event, text) in enumerate(exchange.raw_events):
        instance = conforming(models[event], text) if event in _ANTHROPIC_EVENTS else None
        if instance is not None:
            kind, index = event, getattr(instance, "index", None)
            label = f"anthropic {kind} #{position}"
        else:
            data = _load(text)
            if not isinstance(data, dict):
                findings.append(f"anthropic event #{position}: data is not a JSON object")
                continue
            kind, index = data.get("type"), data.get("index")
            if event == "error":
                # An error event whatever its data's `type` (the adapter takes it as one): its
                # shape is checked against ErrorResponse, which names what differs.
                kind = "error"
            label = f"anthropic {kind or event} #{position}"
            if event is not None and event != kind:
                findings.append(f"{label}: SSE event name {event!r} but data.type {kind!r}")
            # The API documents that new event types may appear and are to be ignored: the
            # adapter records them as notices (exchange.extra["notices"]), not as findings.
            if kind not in _ANTHROPIC_EVENTS:
                continue
            _validate(models[kind], text, label, findings)
        if seen_stop:
            findings.append(f"{label}: event after message_stop")
        if kind == "message_start":
            if seen_start:
                findings.append(f"{label}: second message_start")
            seen_start = True
        elif not seen_start and kind != "error":
            findings.append(f"{label}: before message_start")
            seen_start = True
        if kind == "content_block_start":
            open_blocks.add(index)
        elif kind == "content_block_delta" and index not in open_blocks:
            findings.append(f"{label}: delta for block {index!r} that is not open")
        elif kind == "content_block_stop":
            if index not in open_blocks:
                findings.append(f"{label}: stop for block {index!r} that is not open")
            open_blocks.discard(index)
        elif kind == "message_stop":
            seen_stop = True
        elif kind == "error":
            seen_error = True
    if not seen_stop and not seen_error and not _cut_by_transport(exchange):
        findings.append("anthropic stream without message_stop")
    if seen_stop and open_blocks:
        findings.append(f"anthropic stream: blocks {sorted(map(str, open_blocks))} never stopped")
    return findings


def _check_openai_error(body: Any, label: str, findings: list[str]) -> None:
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        findings.append(f"{label}: no error object")
    elif not isinstance(error.get("message"), str):
        findings.append(f"{label}: error.message: missing or not a string")


def _check_openai(exchange: Exchange) -> list[str]:
    models = _openai_models()
    body_findings = _check_body(
        exchange, "openai", is_error_body,
        lambda _text, body, where, found: _check_openai_error(body, where, found),
        lambda text, found: _validate(models["completion"], text, "openai chat.completion", found))
    if body_findings is not None:
        return body_findings
    findings: list[str] = []
    seen_done = seen_error = seen_usage = False
    conforming = _Conforming("content")
    for position, (event, text) in enumerate(exchange.raw_events):
        label = f"openai chunk #{position}"
        if seen_done:
            findings.append(f"{label}: data after [DONE]")
        if text == "[DONE]":
            seen_done = True
            continue
        chunk = conforming(models["chunk"], text) if event is None else None
        if chunk is not None:
            if chunk.usage is not None:                      # type: ignore[attr-defined]
                seen_usage = True
                if chunk.choices:                            # type: ignore[attr-defined]
                    findings.append(f"{label}: usage chunk with non-empty choices")
            continue
        data = _load(text)
        if not isinstance(data, dict):
            findings.append(f"{label}: data is not a JSON object")
            continue
        if event is not None and event != "error":
            findings.append(f"{label}: unexpected SSE event name {event!r}")
        if data.get("error") is not None or event == "error":
            seen_error = True
            _check_openai_error(data, f"openai error event #{position}", findings)
            continue
        _validate(models["chunk"], text, label, findings)
        if data.get("usage") is not None:
            seen_usage = True
            if data.get("choices"):
                findings.append(f"{label}: usage chunk with non-empty choices")
    cut = _cut_by_transport(exchange) or seen_error
    if not seen_done and not cut:
        findings.append("openai stream without [DONE]")
    options = exchange.request_body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") and not seen_usage and not cut:
        findings.append("openai stream: no usage chunk although stream_options.include_usage was set")
    return findings


# --- OpenAI Responses ----------------------------------------------------------------------------
# Every event validated strictly against the SDK type its `type` names (the members of the SDK's
# stream union), the body against `Response`; an error body needs an error object with a message.
# Protocol-level checks: the SSE event name matches data.type, sequence_number counts up by one,
# response.created comes first, one terminal event (response.completed / .incomplete / .failed)
# ends the stream and nothing follows it, item events name an output item that was added and not
# yet done, and the terminal Response reports usage. Event types the SDK does not know are
# notices (the adapter records them), not findings.

_RESPONSES_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
# Events that belong to an output item by `item_id` (the item must have been added, and not done).
_ITEM_EVENT_PREFIXES = ("response.content_part.", "response.output_text.", "response.refusal.",
                        "response.function_call_arguments.", "response.reasoning_text.",
                        "response.reasoning_summary_")
_RESPONSES = "openai-responses"


@cache
def _responses_models() -> dict[str, type[BaseModel]]:
    """Event type -> the SDK model of that event, from the SDK's own stream union."""
    from openai.types.responses import Response, ResponseStreamEvent

    union = typing.get_args(ResponseStreamEvent)[0]       # Annotated[Union[...], PropertyInfo]
    models: dict[str, type[BaseModel]] = {}
    for member in typing.get_args(union):
        for literal in typing.get_args(member.model_fields["type"].annotation):
            models[literal] = member
    models["(body)"] = Response
    return models


class _Repeats:
    """The same type error in every delta of a stream is one finding, with a count of the events
    like it: a server that leaves a field out of each delta would otherwise fill the exchange's 50
    findings with one fault and cut off the rest (the usage of the terminal event comes last)."""

    def __init__(self) -> None:
        self._first: dict[tuple[str, str], int] = {}          # (event type, error) -> finding index
        self._more: dict[int, int] = {}

    def note(self, kind: str, error: str, finding: str, findings: list[str]) -> None:
        at = self._first.get((kind, error))
        if at is None:
            self._first[(kind, error)] = len(findings)
            findings.append(finding)
        else:
            self._more[at] = self._more.get(at, 0) + 1

    def count_into(self, findings: list[str]) -> None:
        for at, more in self._more.items():
            findings[at] += f" (and {more} more {'event' if more == 1 else 'events'} like it)"


def _check_responses(exchange: Exchange) -> list[str]:
    models = _responses_models()
    body_findings = _check_body(
        exchange, _RESPONSES,
        lambda body: isinstance(body, dict) and body.get("object") != "response" and body.get("error") is not None,
        lambda _text, body, where, found: _check_openai_error(body, where, found),
        lambda text, found: _validate(models["(body)"], text, f"{_RESPONSES} response", found))
    if body_findings is not None:
        return body_findings
    findings: list[str] = []
    seen_created = seen_error = False
    terminal: str | None = None
    expected_sequence: int | None = None
    open_items: set[object] = set()
    repeats = _Repeats()
    for position, (event, text) in enumerate(exchange.raw_events):
        data = _load(text)
        if not isinstance(data, dict):
            findings.append(f"{_RESPONSES} event #{position}: data is not a JSON object")
            continue
        kind = data.get("type")
        label = f"{_RESPONSES} {kind or event} #{position}"
        if kind is None and event is None and isinstance(data.get("error"), dict):
            seen_error = True       # llama-server's unnamed `data: {"error": {...}}`
            _check_openai_error(data, f"{_RESPONSES} error event #{position}", findings)
            continue
        if event is not None and event != kind:
            findings.append(f"{label}: SSE event name {event!r} but data.type {kind!r}")
        if terminal is not None:
            findings.append(f"{label}: event after {terminal}")
        sequence = data.get("sequence_number")
        if type(sequence) is int:
            if expected_sequence is not None and sequence != expected_sequence:
                findings.append(f"{label}: sequence_number {sequence}, expected {expected_sequence}")
            expected_sequence = sequence + 1
        if kind not in models:
            continue            # a notice (exchange.extra["notices"]), as the API's union grows
        errors: list[str] = []
        _validate(models[kind], text, "", errors)
        for error in errors:
            repeats.note(kind, error, f"{label}{error}", findings)
        if kind == "error":
            seen_error = True
            continue
        if kind == "response.created":
            if seen_created:
                findings.append(f"{label}: second response.created")
            seen_created = True
        elif not seen_created:
            findings.append(f"{label}: before response.created")
            seen_created = True
        if kind == "response.output_item.added":
            item = data.get("item")
            open_items.add(item.get("id") if isinstance(item, dict) else None)
        elif kind == "response.output_item.done":
            item = data.get("item")
            item_id = item.get("id") if isinstance(item, dict) else None
            if item_id not in open_items:
                findings.append(f"{label}: item {item_id!r} done but never added")
            open_items.discard(item_id)
        elif kind.startswith(_ITEM_EVENT_PREFIXES) and data.get("item_id") not in open_items:
            findings.append(f"{label}: for item {data.get('item_id')!r} that is not open")
        elif kind in _RESPONSES_TERMINAL:
            terminal = kind
            response = data.get("response")
            if kind != "response.failed" and isinstance(response, dict) and response.get("usage") is None:
                findings.append(f"{label}: no usage")
    repeats.count_into(findings)
    if terminal is None and not seen_error and not _cut_by_transport(exchange):
        findings.append(f"{_RESPONSES} stream without response.completed")
    if terminal not in (None, "response.failed") and open_items:       # a failed one stops where it broke
        findings.append(f"{_RESPONSES} stream: items {sorted(map(str, open_items))} never done")
    return findings
