"""OpenAI Responses: POST {base}/v1/responses (base may already end in /v1), streamed or not.

A stream is named SSE events, each data object carrying its own `type` and a `sequence_number`:
response.created, response.in_progress, then per output item output_item.added, its content
parts (content_part.added, output_text.delta ..., output_text.done, content_part.done) or its
function-call arguments (function_call_arguments.delta ..., .done), output_item.done, and finally
response.completed (or response.incomplete / response.failed) with the whole Response, usage
included. An `error` event ends a stream that failed before a Response could be reported.

TTFT is taken at the first delta that carries generated text, as on chat completions: output text,
refusal, reasoning text or summary, or function-call arguments; a delta with an empty string
carries nothing and does not count. Where a reasoning channel came first, `first_answer_ns` is
the first answer delta (output text, refusal or arguments) after it.

Usage is reported under the Responses API's names (input_tokens, output_tokens, with
input_tokens_details.cached_tokens and output_tokens_details.reasoning_tokens); the Exchange gets
it under the chat-completions names every OpenAI-protocol reader uses (prompt_tokens,
completion_tokens, prompt_tokens_details.cached_tokens, ...), a field absent on the wire staying
absent. The wire's own object stays in the stored raw events.
"""

from __future__ import annotations

from typing import Any, ClassVar

from prober.core.records import ChatRequest, Exchange
from prober.targets.adapter import (
    HTTPAdapter,
    StreamDecoder,
    merge_extra,
    tool_call_record,
)
from prober.targets.openai import openai_tool_choice

# Delta events whose `delta` string is generated content, by what it answers with.
_ANSWER_DELTAS = frozenset({"response.output_text.delta", "response.refusal.delta",
                            "response.function_call_arguments.delta"})
_REASONING_DELTAS = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
# Every event type of the SDK's stream union (tests/targets hold the two equal); anything else is a
# notice. Listed here, not read from the SDK: only conformance, off the timing path, imports it.
KNOWN_EVENTS = frozenset({
    "response.created", "response.in_progress", "response.queued", "response.completed",
    "response.incomplete", "response.failed", "error",
    "response.output_item.added", "response.output_item.done",
    "response.content_part.added", "response.content_part.done",
    "response.output_text.delta", "response.output_text.done", "response.output_text.annotation.added",
    "response.refusal.delta", "response.refusal.done",
    "response.function_call_arguments.delta", "response.function_call_arguments.done",
    "response.reasoning_text.delta", "response.reasoning_text.done",
    "response.reasoning_summary_part.added", "response.reasoning_summary_part.done",
    "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
    "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done",
    "response.file_search_call.in_progress", "response.file_search_call.searching",
    "response.file_search_call.completed",
    "response.web_search_call.in_progress", "response.web_search_call.searching",
    "response.web_search_call.completed",
    "response.code_interpreter_call.in_progress", "response.code_interpreter_call.interpreting",
    "response.code_interpreter_call.completed", "response.code_interpreter_call_code.delta",
    "response.code_interpreter_call_code.done",
    "response.image_generation_call.in_progress", "response.image_generation_call.generating",
    "response.image_generation_call.partial_image", "response.image_generation_call.completed",
    "response.mcp_call.in_progress", "response.mcp_call.completed", "response.mcp_call.failed",
    "response.mcp_call_arguments.delta", "response.mcp_call_arguments.done",
    "response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed",
    "response.mcp_list_tools.failed",
    "response.audio.delta", "response.audio.done", "response.audio.transcript.delta",
    "response.audio.transcript.done", "response.compaction.compacting",
    "response.shell_call_command.added", "response.shell_call_command.delta", "response.shell_call_command.done",
    "response.shell_call_output_content.delta", "response.shell_call_output_content.done",
})


def responses_usage(usage: Any) -> dict[str, Any] | None:
    """A Responses usage object under the chat-completions names; absent fields stay absent."""
    if not isinstance(usage, dict):
        return None
    out: dict[str, Any] = {}
    for wire, name in (("input_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens"),
                       ("total_tokens", "total_tokens")):
        if wire in usage:
            out[name] = usage[wire]
    for wire, name in (("input_tokens_details", "prompt_tokens_details"),
                       ("output_tokens_details", "completion_tokens_details")):
        if wire in usage:
            out[name] = dict(usage[wire]) if isinstance(usage[wire], dict) else usage[wire]
    return out


def responses_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A function tool in the Responses API's flat shape ({"type": "function", "name", "parameters"});
    chat-completions and Anthropic-style tools are converted, anything else is sent as given."""
    function = tool.get("function") if tool.get("type") == "function" else None
    if not isinstance(function, dict):
        if "input_schema" not in tool or tool.get("type") not in (None, "custom"):
            return tool
        function = {"name": tool.get("name"), "parameters": tool["input_schema"],
                    **{k: tool[k] for k in ("description", "strict") if k in tool}}
    out: dict[str, Any] = {"type": "function", "name": function.get("name")}
    if "description" in function:
        out["description"] = function["description"]
    out["parameters"] = function.get("parameters") or {"type": "object", "properties": {}}
    out["strict"] = function.get("strict", False)
    return out


def responses_tool_choice(choice: Any) -> Any:
    """The chat-completions choice (openai_tool_choice) with a named function in the Responses
    API's flat shape: {"type": "function", "name": ...}."""
    choice = openai_tool_choice(choice)
    function = choice.get("function") if isinstance(choice, dict) and choice.get("type") == "function" else None
    return {"type": "function", "name": function.get("name")} if isinstance(function, dict) else choice


def _instructions(system: str | list[dict[str, Any]]) -> str:
    if isinstance(system, str):
        return system
    # Anthropic-style blocks: the text parts, without Anthropic-only keys (cache_control).
    return "\n\n".join(block.get("text", "") for block in system
                       if isinstance(block, dict) and block.get("type", "text") == "text")


def _input_message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message as a Responses input message: text blocks become input_text (output_text
    for the assistant's turns), a plain string stays a string."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    part = "output_text" if message.get("role") == "assistant" else "input_text"
    parts = [{"type": part, "text": block.get("text", "")} if isinstance(block, dict)
             and block.get("type") == "text" else block for block in content]
    return {**message, "content": parts}


def _nested_error(obj: dict[str, Any]) -> dict[str, Any]:
    """The Responses `error` event carries code and message at the top level (data.type is
    "error"); nested as {"error": {...}}, its code classifies it as the other protocols' bodies do."""
    if isinstance(obj.get("error"), dict):
        return obj
    return {"error": {key: obj[key] for key in ("code", "message", "param") if key in obj}}


class ResponsesStreamDecoder(StreamDecoder):
    """Named events, each with its `type`; the terminal event carries the whole Response."""

    terminal_name = "response.completed"

    def __init__(self, exchange: Exchange) -> None:
        super().__init__(exchange)
        self._calls: dict[Any, dict[str, Any]] = {}      # item id -> function call in progress
        self._refusal: list[str] = []
        self._reasoning: list[str] = []
        self._reasoned = False

    def feed(self, event: str | None, data: str, ns: int) -> None:
        obj = self._decode(event, data, ns)
        if obj is None:
            return
        kind = obj.get("type") or event
        if kind in _ANSWER_DELTAS or kind in _REASONING_DELTAS:
            self._delta(kind, obj, ns)
        elif kind == "response.output_item.added":
            item = obj.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                self._calls[item.get("id")] = {"item": item, "args": []}
        elif kind in ("response.created", "response.in_progress", "response.queued"):
            self._take_response(obj.get("response"))
        elif kind in _TERMINAL:
            response = obj.get("response")
            self._take_response(response)
            self.done = True
            self.end_ns = ns
            if kind == "response.failed":
                error = response.get("error") if isinstance(response, dict) else None
                self._error_event({"error": error} if isinstance(error, dict) else _nested_error(obj), ns)
        elif kind == "error" or event == "error" or (kind is None and isinstance(obj.get("error"), dict)):
            # The API's `error` event; llama-server sends `data: {"error": {...}}` without a name.
            self._error_event(_nested_error(obj), ns)
        elif kind not in KNOWN_EVENTS:
            # The SDK's union grows with the API: an unknown event is a notice, as on Anthropic.
            notices = self.ex.extra.setdefault("notices", [])
            notice = f"unknown event type {kind!r} ignored"
            if notice not in notices:
                notices.append(notice)

    def _delta(self, kind: str, obj: dict[str, Any], ns: int) -> None:
        piece = obj.get("delta")
        if not isinstance(piece, str) or not piece:
            return              # an empty piece carries no generated content (TTFT, ITL)
        if kind == "response.output_text.delta":
            self._text.append(piece)
        elif kind == "response.refusal.delta":
            self._refusal.append(piece)
        elif kind == "response.function_call_arguments.delta":
            call = self._calls.get(obj.get("item_id"))
            if call is None:     # arguments for an item never announced: keep them all the same
                call = self._calls[obj.get("item_id")] = {"item": {"id": obj.get("item_id")}, "args": []}
            call["args"].append(piece)
        else:
            self._reasoning.append(piece)
            self._reasoned = True
        self._content(ns, len(piece), answer=kind in _ANSWER_DELTAS)

    def _take_response(self, response: Any) -> None:
        if not isinstance(response, dict):
            return
        take_response_fields(self.ex, response)

    def finish(self) -> None:
        super().finish()
        ex = self.ex
        for call in self._calls.values():
            item = call["item"]
            ex.tool_calls.append(tool_call_record("function", item.get("call_id") or item.get("id"),
                                                  item.get("name"), "".join(call["args"])))
        if self._refusal:
            ex.extra["refusal"] = "".join(self._refusal)
        if self._reasoning:
            ex.extra["reasoning"] = "".join(self._reasoning)


def take_response_fields(ex: Exchange, response: dict[str, Any]) -> None:
    """Identity, status and usage of a Response object (a stream's created/terminal events carry
    one; a non-streamed body is one)."""
    if ex.request_id is None and isinstance(response.get("id"), str):
        ex.request_id = response["id"]
    if isinstance(response.get("model"), str):
        ex.response_model = response["model"]
    if isinstance(response.get("service_tier"), str):
        ex.service_tier = response["service_tier"]
    status = response.get("status")
    if status in ("completed", "incomplete", "failed", "cancelled"):
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        ex.finish_reason = reason if isinstance(reason, str) else status
    usage = responses_usage(response.get("usage"))
    if usage is not None:
        ex.usage = usage


class ResponsesAdapter(HTTPAdapter):
    protocol = "openai-responses"
    endpoint = "/responses"
    decoder = ResponsesStreamDecoder
    wire_names: ClassVar[dict[str, str]] = {}

    def _protocol_headers(self, api_key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def build_body(self, request: ChatRequest, skip: frozenset[str] | set[str] = frozenset()
                   ) -> tuple[dict[str, Any], list[str]]:
        body: dict[str, Any] = {"model": self.target.model, "max_output_tokens": request.max_tokens}
        if request.system is not None:
            body["instructions"] = _instructions(request.system)
        body["input"] = [_input_message(message) for message in request.messages]
        body.update(self._sampling(request, skip))
        if request.tools is not None:
            body["tools"] = [responses_tool(tool) for tool in request.tools]
        if request.tool_choice is not None:
            body["tool_choice"] = responses_tool_choice(request.tool_choice)
        if request.json_schema is not None:
            schema = request.json_schema
            body["text"] = {"format": {"type": "json_schema", "name": schema.get("name", "output"),
                                       "schema": schema.get("schema", {}), "strict": schema.get("strict", True)}}
        elif request.json_object:
            body["text"] = {"format": {"type": "json_object"}}
        # A probe's requests are not conversations to resume: the hosted API keeps every response
        # for 30 days unless told not to.
        body["store"] = False
        body["stream"] = request.stream
        return merge_extra(body, request.extra), []

    def parse_body(self, ex: Exchange, body: dict[str, Any]) -> None:
        take_response_fields(ex, body)
        texts, refusals, reasoning = [], [], []
        for item in body.get("output") or []:
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind == "message":
                for part in item.get("content") or []:
                    if not isinstance(part, dict):
                        continue
                    if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                        texts.append(part["text"])
                    elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                        refusals.append(part["refusal"])
            elif kind == "function_call":
                ex.tool_calls.append(tool_call_record("function", item.get("call_id") or item.get("id"),
                                                      item.get("name"), item.get("arguments")))
            elif kind == "reasoning":
                for part in [*(item.get("content") or []), *(item.get("summary") or [])]:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        reasoning.append(part["text"])
        ex.text = "".join(texts)
        if refusals:
            ex.extra["refusal"] = "".join(refusals)
        if reasoning:
            ex.extra["reasoning"] = "".join(reasoning)
