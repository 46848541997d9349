"""OpenAI Responses (POST /v1/responses) on the server side: request parsing and response encoding.

Written from the API reference and the `openai` SDK's Responses types, independently of the
prober's client adapter (prober/targets/responses.py), so each checks the other. A stream is
`event: TYPE\\ndata: JSON\\n\\n` events, each data object with its `type` and a `sequence_number`
counting from 0: response.created and response.in_progress (the Response so far, `usage: null`),
response.output_item.added and, for a message, response.content_part.added, all sent before the
first token; then one response.output_text.delta per token (a forced tool call: one
response.function_call_arguments.delta per token); then the matching .done events,
response.output_item.done and response.completed with the final Response and its usage. An
answer cut at max_output_tokens ends with response.incomplete (incomplete_details.reason
"max_output_tokens") instead.

The scenario's behaviours (timing, caching, nondeterminism, structured output, forced tools) read
the request through `GenRequest.body`, in the chat-completions vocabulary they share with
/v1/chat/completions; `parse_request` adds that view (messages, response_format, chat-shaped
tools and tool_choice) to the Responses body, so the engine answers both routes alike.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

# HTTP errors (error_response), request ids and JSON are the chat-completions route's: both APIs
# share them; the app calls error_response and new_request_id on this module as on the others.
from prober.emulator.openai_wire import ERRORS, dumps, request_object
from prober.emulator.openai_wire import error_response as error_response
from prober.emulator.openai_wire import new_request_id as new_request_id
from prober.emulator.plan import ErrorKind, GenRequest, InvalidRequest, PromptBlock, ResponsePlan

# A failure after the stream started: the code an `error` event or a failed Response carries.
_STREAM_CODES: dict[str, str] = {"overloaded": "server_is_overloaded", "rate_limit": "rate_limit_exceeded"}
_JSON = "application/json"
_SSE = "text/event-stream; charset=utf-8"
RESPONSES_BODY = "responses_body"


# --- requests ---------------------------------------------------------------------------------

def _part_text(part: Any) -> str:
    if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text") \
            and isinstance(text := part.get("text"), str):
        return text
    return json.dumps(part, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _item_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_part_text(part) for part in content)
    return ""


def _input_messages(data: dict[str, Any]) -> list[dict[str, Any]]:
    """`instructions` and `input` (a string or a list of items) as chat messages."""
    messages: list[dict[str, Any]] = []
    instructions = data.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise InvalidRequest("Invalid type for 'instructions': expected a string.", param="instructions")
        messages.append({"role": "system", "content": instructions})
    source = data.get("input")
    if isinstance(source, str):
        return [*messages, {"role": "user", "content": source}]
    if not isinstance(source, list) or not source:
        raise InvalidRequest("Missing required parameter: 'input'.", param="input")
    for index, item in enumerate(source):
        if not isinstance(item, dict):
            raise InvalidRequest(f"Invalid type for 'input[{index}]': expected an object.", param=f"input[{index}]")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise InvalidRequest(f"Invalid value for 'input[{index}].role'.", param=f"input[{index}].role")
            messages.append({"role": role, "content": _item_text(item.get("content"))})
        else:       # function calls and their outputs, reasoning items: in the prompt as JSON
            messages.append({"role": "user", "content": _part_text(item)})
    return messages


def _chat_tool(tool: Any) -> Any:
    if isinstance(tool, dict) and tool.get("type") == "function":
        function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}
        return {"type": "function", "function": function}
    return tool


def _chat_tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _chat_response_format(text: Any) -> dict[str, Any] | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {key: fmt[key] for key in ("name", "schema", "strict")
                                                       if key in fmt}}
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    return None


def parse_request(body: bytes, request_id: str) -> GenRequest:
    data, model = request_object(body)
    messages = _input_messages(data)
    tools = data.get("tools") or []
    if not isinstance(tools, list):
        raise InvalidRequest("Invalid type for 'tools': expected an array.", param="tools")
    blocks = [PromptBlock("tools", json.dumps(tool, sort_keys=True, separators=(",", ":"))) for tool in tools]
    blocks += [PromptBlock("system" if m["role"] in ("system", "developer") else "messages", m["content"],
                           role=m["role"]) for m in messages]
    max_tokens = data.get("max_output_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise InvalidRequest("Invalid 'max_output_tokens': expected an integer greater than or equal to 1.",
                             param="max_output_tokens")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("Invalid type for 'stream': expected a boolean.", param="stream")
    view: dict[str, Any] = {"messages": messages, "tools": [_chat_tool(tool) for tool in tools]}
    if "tool_choice" in data:
        view["tool_choice"] = _chat_tool_choice(data["tool_choice"])
    if (response_format := _chat_response_format(data.get("text"))) is not None:
        view["response_format"] = response_format
    # The Responses body itself stays under RESPONSES_BODY, for the settings a Response echoes.
    return GenRequest(protocol="openai", request_id=request_id, model=model, stream=stream,
                      max_tokens=max_tokens, blocks=blocks, body={**data, **view, RESPONSES_BODY: data})


# --- responses --------------------------------------------------------------------------------

class Encoder:
    """Renders one request's plan as a Response object or as its event stream."""

    def __init__(self, request: GenRequest, plan: ResponsePlan) -> None:
        self.request = request
        self.plan = plan
        self.response_id = f"resp_{uuid.uuid4().hex}"
        self.created_at = int(time.time())
        self.item_id = f"msg_{uuid.uuid4().hex}" if plan.tool_name is None else f"fc_{uuid.uuid4().hex}"
        self.call_id = f"call_{uuid.uuid4().hex[:24]}"
        self._sequence = 0
        body = request.body.get(RESPONSES_BODY) or {}
        if plan.tool_name is None:
            self._delta_head = (b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
                                b'"sequence_number":')
            self._delta_mid = (b',"item_id":' + dumps(self.item_id) + b',"output_index":0,"content_index":0,'
                               b'"delta":')
            self._delta_tail = b',"logprobs":[]}\n\n'
        else:
            self._delta_head = (b'event: response.function_call_arguments.delta\ndata: '
                                b'{"type":"response.function_call_arguments.delta","sequence_number":')
            self._delta_mid = b',"item_id":' + dumps(self.item_id) + b',"output_index":0,"delta":'
            self._delta_tail = b"}\n\n"
        # The request's settings as every Response echoes them.
        self._echo = {
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "metadata": body.get("metadata") or {},
            "model": request.model,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": None,
            "prompt_cache_key": body.get("prompt_cache_key"),
            "reasoning": {"effort": None, "summary": None},
            "service_tier": "default",
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": {"format": (body.get("text") or {}).get("format") or {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": [dict(tool) for tool in body.get("tools") or [] if isinstance(tool, dict)],
            "top_p": body.get("top_p", 1.0),
            "truncation": "disabled",
            "user": None,
        }

    @property
    def _incomplete(self) -> bool:
        return self.plan.finish == "length"

    def _event(self, kind: str, fields: dict[str, Any]) -> bytes:
        payload = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + dumps(payload) + b"\n\n"

    def _response(self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None,
                  error: dict[str, Any] | None = None) -> dict[str, Any]:
        details = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {"id": self.response_id, "object": "response", "created_at": self.created_at, "status": status,
                "background": False, "error": error, "incomplete_details": details, **self._echo,
                "output": output, "usage": usage}

    def _usage(self) -> dict[str, Any]:
        usage = self.plan.usage
        return {"input_tokens": usage.input_tokens,
                "input_tokens_details": {"cached_tokens": usage.cache_read_tokens or 0,
                                         "cache_write_tokens": usage.cache_write_tokens or 0},
                "output_tokens": usage.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.input_tokens + usage.output_tokens}

    def _text_part(self, text: str) -> dict[str, Any]:
        return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}

    def _item(self, status: str, text: str) -> dict[str, Any]:
        if self.plan.tool_name is None:
            content = [self._text_part(text)] if status != "in_progress" else []
            return {"id": self.item_id, "type": "message", "status": status, "content": content, "role": "assistant"}
        return {"id": self.item_id, "type": "function_call", "status": status, "arguments": text,
                "call_id": self.call_id, "name": self.plan.tool_name}

    def stream_headers(self) -> list[tuple[str, str]]:
        return [("content-type", _SSE), ("cache-control", "no-cache"), ("x-request-id", self.request.request_id)]

    def json_headers(self) -> list[tuple[str, str]]:
        return [("content-type", _JSON), ("x-request-id", self.request.request_id)]

    def preamble(self) -> bytes:
        started = self._response("in_progress", [], None)
        out = self._event("response.created", {"response": started})
        out += self._event("response.in_progress", {"response": started})
        out += self._event("response.output_item.added", {"output_index": 0, "item": self._item("in_progress", "")})
        if self.plan.tool_name is None:
            out += self._event("response.content_part.added", {"item_id": self.item_id, "output_index": 0,
                                                               "content_index": 0, "part": self._text_part("")})
        return out

    def token(self, text: str) -> bytes:
        sequence = self._sequence
        self._sequence += 1
        return self._delta_head + str(sequence).encode() + self._delta_mid + dumps(text) + self._delta_tail

    def malformed(self) -> bytes:
        return self._delta_head + b"\n\n"             # JSON cut short

    def stream_error(self, kind: ErrorKind) -> bytes:
        message = ERRORS[kind][3]
        code = _STREAM_CODES.get(kind, "server_error")
        if kind == "overloaded":      # no Response to fail: the stream's own error event
            return self._event("error", {"code": code, "message": message, "param": None})
        failed = self._response("failed", [self._item("incomplete", "")], None, {"code": code, "message": message})
        return self._event("response.failed", {"response": failed})

    def epilogue(self) -> bytes:
        text = self.plan.text
        status = "incomplete" if self._incomplete else "completed"
        at = {"item_id": self.item_id, "output_index": 0}
        if self.plan.tool_name is None:
            out = self._event("response.output_text.done", {**at, "content_index": 0, "text": text, "logprobs": []})
            out += self._event("response.content_part.done", {**at, "content_index": 0,
                                                              "part": self._text_part(text)})
        else:
            out = self._event("response.function_call_arguments.done", {**at, "name": self.plan.tool_name,
                                                                        "arguments": text})
        item = self._item(status, text)
        out += self._event("response.output_item.done", {"output_index": 0, "item": item})
        final = self._response(status, [item], self._usage())
        return out + self._event(f"response.{status}", {"response": final})

    def message(self) -> bytes:
        status = "incomplete" if self._incomplete else "completed"
        return dumps(self._response(status, [self._item(status, self.plan.text)], self._usage()))

    def error(self, kind: ErrorKind) -> tuple[int, list[tuple[str, str]], bytes]:
        return error_response(kind, self.request.request_id)
