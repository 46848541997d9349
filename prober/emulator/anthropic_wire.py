"""Anthropic Messages on the server side: request parsing and response encoding.

Written from the recorded wire samples and the API reference, independently of the prober's
client adapter, so each checks the other. Stream events are `event: NAME\\ndata: JSON\\n\\n`, in the
order message_start, content_block_start, ping, content_block_delta..., content_block_stop,
message_delta, message_stop.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

from prober.emulator.plan import ErrorKind, GenRequest, InvalidRequest, PromptBlock, ResponsePlan

_ERRORS: dict[str, tuple[int, str, str]] = {
    "invalid_request": (400, "invalid_request_error", "invalid request"),
    "not_found": (404, "not_found_error", "not found"),
    "rate_limit": (429, "rate_limit_error", "Number of requests has exceeded your rate limit"),
    "overloaded": (529, "overloaded_error", "Overloaded"),
    "server_error": (500, "api_error", "Internal server error"),
}
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}
# Penalty fields the Messages API does not have: the hosted API refuses them.
_UNSUPPORTED_FIELDS = ("frequency_penalty", "presence_penalty", "repetition_penalty", "repeat_penalty")
_JSON = "application/json"
_SSE = "text/event-stream; charset=utf-8"

_DELTA_HEAD = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
               b'"delta":{"type":"text_delta","text":')
_TOOL_DELTA_HEAD = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
                    b'"delta":{"type":"input_json_delta","partial_json":')
_MALFORMED = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_del\n\n'


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)   # one instance: json.dumps with
                                                                         # options builds one per call


def _dumps(value: Any) -> bytes:
    return _ENCODER.encode(value).encode()


def _event(name: str, payload: Any) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (name.encode(), _dumps(payload))


def new_request_id() -> str:
    return f"req_{uuid.uuid4().hex[:24]}"


# --- requests ---------------------------------------------------------------------------------

def _body_object(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest("There was an error parsing the body of your request: not valid JSON") from None
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object")
    return data


def _block_text(block: Any) -> str:
    """What a content block contributes to the prompt: its text, or its canonical JSON."""
    if isinstance(block, dict):
        if block.get("type") == "text" and isinstance(text := block.get("text"), str):
            return text
        block = {key: value for key, value in block.items() if key != "cache_control"}
    return json.dumps(block, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _cache_control(block: Any) -> dict[str, Any] | None:
    control = block.get("cache_control") if isinstance(block, dict) else None
    return control if isinstance(control, dict) else None


def render_prompt(data: dict[str, Any]) -> list[PromptBlock]:
    """The prompt's blocks in the API's render order: tools, then system, then messages."""
    blocks: list[PromptBlock] = []
    tools = data.get("tools") or []
    if not isinstance(tools, list):
        raise InvalidRequest("tools: Input should be a valid list")
    for tool in tools:
        blocks.append(PromptBlock("tools", _block_text(tool), cache_control=_cache_control(tool)))
    system = data.get("system")
    if isinstance(system, str):
        blocks.append(PromptBlock("system", system))
    elif isinstance(system, list):
        blocks.extend(PromptBlock("system", _block_text(b), cache_control=_cache_control(b)) for b in system)
    elif system is not None:
        raise InvalidRequest("system: Input should be a valid string or list of content blocks")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: Field required" if messages is None
                             else "messages: Input should be a non-empty list")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise InvalidRequest(f"messages.{index}: each message needs role 'user' or 'assistant'")
        content = message.get("content")
        role = message["role"]
        if isinstance(content, str):
            blocks.append(PromptBlock("messages", content, role=role))
        elif isinstance(content, list):
            blocks.extend(PromptBlock("messages", _block_text(b), role=role, cache_control=_cache_control(b))
                          for b in content)
        else:
            raise InvalidRequest(f"messages.{index}.content: Field required")
    return blocks


MAX_CACHE_BREAKPOINTS = 4


def _place_breakpoints(data: dict[str, Any], blocks: list[PromptBlock]) -> list[PromptBlock]:
    """The blocks with a top-level `cache_control` put on the last block (once, if that block has
    its own), every cache_control checked: type ephemeral, ttl 5m or 1h, at most four in all."""
    top = data.get("cache_control")
    if top is not None:
        if not isinstance(top, dict):
            raise InvalidRequest("cache_control: Input should be a valid dictionary")
        if blocks[-1].cache_control is None:
            blocks = [*blocks[:-1], dataclasses.replace(blocks[-1], cache_control=top)]
    marked = [block.cache_control for block in blocks if block.cache_control is not None]
    for control in marked:
        if control.get("type") != "ephemeral":
            raise InvalidRequest("cache_control.type: Input should be 'ephemeral'")
        if control.get("ttl", "5m") not in ("5m", "1h"):
            raise InvalidRequest("cache_control.ttl: Input should be '5m' or '1h'")
    if len(marked) > MAX_CACHE_BREAKPOINTS:
        raise InvalidRequest(f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
                             f"Found {len(marked)}.")
    return blocks


def _model(data: dict[str, Any]) -> str:
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("model: Field required")
    return model


def parse_request(body: bytes, request_id: str) -> GenRequest:
    data = _body_object(body)
    model = _model(data)
    max_tokens = data.get("max_tokens")
    if max_tokens is None:
        raise InvalidRequest("max_tokens: Field required")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise InvalidRequest("max_tokens: Input should be an integer greater than or equal to 1")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("stream: Input should be a valid boolean")
    for name in _UNSUPPORTED_FIELDS:
        if name in data:
            raise InvalidRequest(f"{name}: Extra inputs are not permitted", param=name)
    return GenRequest(protocol="anthropic", request_id=request_id, model=model, stream=stream,
                      max_tokens=max_tokens, blocks=_place_breakpoints(data, render_prompt(data)), body=data)


def count_tokens_response(body: bytes) -> bytes:
    """POST /v1/messages/count_tokens: the same count generation reports as input_tokens."""
    data = _body_object(body)
    _model(data)
    return _dumps({"input_tokens": sum(block.tokens for block in render_prompt(data))})


def models_response(models: list[str]) -> bytes:
    entries = [{"type": "model", "id": name, "display_name": name, "created_at": "2025-01-01T00:00:00Z"}
               for name in models]
    return _dumps({"data": entries, "has_more": False, "first_id": models[0], "last_id": models[-1]})


def error_response(kind: ErrorKind, request_id: str, message: str | None = None, param: str | None = None,
                   retry_after_s: int | None = None) -> tuple[int, list[tuple[str, str]], bytes]:
    # `param` is accepted for symmetry with openai_wire: Anthropic names the field in the message.
    status, error_type, default_message = _ERRORS[kind]
    headers = [("content-type", _JSON), ("request-id", request_id)]
    if retry_after_s is not None:
        headers.append(("retry-after", str(retry_after_s)))
    return status, headers, _dumps(_error_body(error_type, message or default_message, request_id))


def _error_body(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}, "request_id": request_id}


# --- responses --------------------------------------------------------------------------------

class Encoder:
    """Renders one request's plan as a Message or as its event stream."""

    def __init__(self, request: GenRequest, plan: ResponsePlan) -> None:
        self.request = request
        self.plan = plan
        self.message_id = f"msg_{uuid.uuid4().hex[:24]}"
        self.tool_use_id = f"toolu_{uuid.uuid4().hex[:24]}"
        self.delta_head = _DELTA_HEAD if plan.tool_name is None else _TOOL_DELTA_HEAD
        self.stop_reasons = _STOP_REASONS if plan.tool_name is None else {**_STOP_REASONS, "stop": "tool_use"}

    def _tool_use_block(self, tool_input: Any) -> dict[str, Any]:
        return {"type": "tool_use", "id": self.tool_use_id, "name": self.plan.tool_name, "input": tool_input}

    def _usage(self, output_tokens: int) -> dict[str, Any]:
        usage = self.plan.usage
        read = usage.cache_read_tokens
        write = usage.cache_write_tokens
        fields: dict[str, Any] = {"input_tokens": usage.input_tokens - (read or 0) - (write or 0)}
        if write is not None:
            fields["cache_creation_input_tokens"] = write
        if read is not None:
            fields["cache_read_input_tokens"] = read
        if usage.cache_write_5m_tokens is not None or usage.cache_write_1h_tokens is not None:
            fields["cache_creation"] = {"ephemeral_5m_input_tokens": usage.cache_write_5m_tokens or 0,
                                        "ephemeral_1h_input_tokens": usage.cache_write_1h_tokens or 0}
        fields["output_tokens"] = output_tokens
        return fields

    def _message(self, content: list[dict[str, Any]], stop_reason: str | None, output_tokens: int) -> dict[str, Any]:
        return {"id": self.message_id, "type": "message", "role": "assistant", "model": self.request.model,
                "content": content, "stop_reason": stop_reason, "stop_sequence": None,
                "usage": self._usage(output_tokens)}

    def stream_headers(self) -> list[tuple[str, str]]:
        return [("content-type", _SSE), ("cache-control", "no-cache"), ("request-id", self.request.request_id)]

    def json_headers(self) -> list[tuple[str, str]]:
        return [("content-type", _JSON), ("request-id", self.request.request_id)]

    def preamble(self) -> bytes:
        # message_start's output_tokens is the API's interim 1, not a count.
        start = {"type": "message_start", "message": self._message([], None, 1)}
        content_block = {"type": "text", "text": ""} if self.plan.tool_name is None else self._tool_use_block({})
        block = {"type": "content_block_start", "index": 0, "content_block": content_block}
        return (_event("message_start", start) + _event("content_block_start", block)
                + b'event: ping\ndata: {"type": "ping"}\n\n')

    def token(self, text: str) -> bytes:
        return self.delta_head + _dumps(text) + b"}}\n\n"

    def malformed(self) -> bytes:
        return _MALFORMED

    def stream_error(self, kind: ErrorKind) -> bytes:
        _, error_type, message = _ERRORS[kind]
        return _event("error", _error_body(error_type, message, self.request.request_id))

    def epilogue(self) -> bytes:
        delta = {"type": "message_delta",
                 "delta": {"stop_reason": self.stop_reasons[self.plan.finish], "stop_sequence": None},
                 "usage": {"output_tokens": self.plan.usage.output_tokens}}
        return (_event("content_block_stop", {"type": "content_block_stop", "index": 0})
                + _event("message_delta", delta) + _event("message_stop", {"type": "message_stop"}))

    def message(self) -> bytes:
        content = [self._content_block()]
        return _dumps(self._message(content, self.stop_reasons[self.plan.finish], self.plan.usage.output_tokens))

    def _content_block(self) -> dict[str, Any]:
        if self.plan.tool_name is None:
            return {"type": "text", "text": self.plan.text}
        try:
            tool_input = json.loads(self.plan.text)
        except ValueError:
            # Arguments cut short (max_tokens) do not parse; the API would give no usable input either.
            tool_input = {}
        return self._tool_use_block(tool_input)

    def error(self, kind: ErrorKind) -> tuple[int, list[tuple[str, str]], bytes]:
        return error_response(kind, self.request.request_id)
