"""Anthropic Messages: POST {base}/v1/messages, streamed or not, and /v1/messages/count_tokens."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from prober.core.records import ChatRequest, Exchange
from prober.targets.adapter import (
    HTTPAdapter,
    StreamDecoder,
    merge_extra,
    tool_call_record,
)

_TOOL_BLOCKS = ("tool_use", "server_tool_use", "mcp_tool_use")
# Delta types whose content is measured in characters; a zero-length one is not a content chunk.
_SIZED_DELTAS = frozenset({"text_delta", "input_json_delta", "thinking_delta", "signature_delta"})
_KNOWN_EVENTS = frozenset({"message_start", "content_block_start", "content_block_delta",
                           "content_block_stop", "message_delta", "message_stop", "error"})


def _service_tier(usage: dict[str, Any]) -> str | None:
    """Anthropic reports the tier that served the request inside usage ("standard", "priority")."""
    tier = usage.get("service_tier")
    return tier if isinstance(tier, str) else None


def anthropic_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as Anthropic wants it; an OpenAI-style function tool is converted."""
    function = tool.get("function")
    if tool.get("type") == "function" and isinstance(function, dict):
        out = {"name": function.get("name")}
        if "description" in function:
            out["description"] = function["description"]
        out["input_schema"] = function.get("parameters") or {"type": "object", "properties": {}}
        if "strict" in function:
            out["strict"] = function["strict"]
        return out
    return tool


def anthropic_tool_choice(choice: Any) -> Any:
    """"auto" | "any" | "required" | "none" | {"name": ...} | an Anthropic or OpenAI dict."""
    if isinstance(choice, str):
        return {"type": {"required": "any"}.get(choice, choice)}
    if isinstance(choice, dict):
        if choice.get("type") == "function" and isinstance(choice.get("function"), dict):
            return {"type": "tool", "name": choice["function"].get("name")}
        if "type" not in choice and "name" in choice:
            return {"type": "tool", **choice}
    return choice


class AnthropicStreamDecoder(StreamDecoder):
    """message_start -> content blocks (start, deltas, stop) -> message_delta -> message_stop.
    TTFT at the first content_block_delta that carries content (an empty text, partial_json or
    thinking piece and signature_delta do not); the answer's TTFT at the first such delta outside
    the thinking channel (text or tool input); usage from message_start.message.usage,
    overwritten key by key by each message_delta.usage (cumulative), never summed."""

    terminal_name = "message_stop"

    def __init__(self, exchange: Exchange) -> None:
        super().__init__(exchange)
        self._tools: dict[Any, dict[str, Any]] = {}    # block index -> tool block in progress
        self._thinking: list[str] = []

    def feed(self, event: str | None, data: str, ns: int) -> None:
        obj = self._decode(event, data, ns)
        if obj is None:
            return
        # An SSE event named `error` is an error whatever its data says: llama-server's carries
        # {"code":503,"message":...,"type":"unavailable_error"}, others only {"error": {...}}.
        kind = "error" if event == "error" else obj.get("type") or event
        ex = self.ex
        if kind == "content_block_delta":
            delta = obj.get("delta")
            chars = 0
            answer = True
            if isinstance(delta, dict):
                dtype = delta.get("type")
                if dtype == "text_delta":
                    text = delta.get("text")
                    if isinstance(text, str):
                        self._text.append(text)
                        chars = len(text)
                elif dtype == "input_json_delta":
                    piece = delta.get("partial_json")
                    tool = self._tools.get(obj.get("index"))
                    if isinstance(piece, str):
                        chars = len(piece)
                        if tool is not None:
                            tool["json"].append(piece)
                elif dtype == "thinking_delta":
                    answer = False
                    thinking = delta.get("thinking")
                    if isinstance(thinking, str):
                        self._thinking.append(thinking)
                        chars = len(thinking)
                # An empty piece (signature_delta, an empty input_json_delta) carries no generated
                # content: counted, it would open TTFT early and put a ~0 ms gap into ITL.
                if chars or dtype not in _SIZED_DELTAS:
                    self._content(ns, chars, answer)
            else:
                self._content(ns, chars)
        elif kind == "message_start":
            message = obj.get("message")
            if isinstance(message, dict):
                usage = message.get("usage")
                if isinstance(usage, dict):
                    ex.usage = dict(usage)
                    ex.service_tier = _service_tier(usage)
                ex.response_model = message.get("model")
                if ex.request_id is None and isinstance(message.get("id"), str):
                    ex.request_id = message["id"]
        elif kind == "content_block_start":
            block = obj.get("content_block")
            if isinstance(block, dict):
                btype = block.get("type")
                if btype in _TOOL_BLOCKS:
                    self._tools[obj.get("index")] = {"block": block, "json": []}
                elif btype == "text" and isinstance(block.get("text"), str):
                    self._text.append(block["text"])
        elif kind == "message_delta":
            delta = obj.get("delta")
            if isinstance(delta, dict):
                if delta.get("stop_reason") is not None:
                    ex.finish_reason = delta["stop_reason"]
                if delta.get("stop_sequence") is not None:
                    ex.extra["stop_sequence"] = delta["stop_sequence"]
            usage = obj.get("usage")
            if isinstance(usage, dict):
                if ex.usage is None:
                    ex.usage = {}
                for key, value in usage.items():
                    if value is not None or key not in ex.usage:
                        ex.usage[key] = value
                ex.service_tier = _service_tier(ex.usage)
        elif kind == "message_stop":
            self.done = True
            self.end_ns = ns
        elif kind == "error":
            self._error_event(obj, ns)
        elif kind != "ping" and kind not in _KNOWN_EVENTS:
            # The API says new event types may appear and are to be ignored: a notice, not a fault.
            notices = ex.extra.setdefault("notices", [])
            notice = f"unknown event type {kind!r} ignored"
            if notice not in notices:
                notices.append(notice)

    def finish(self) -> None:
        super().finish()
        for tool in self._tools.values():
            block = tool["block"]
            self.ex.tool_calls.append(tool_call_record(
                block.get("type"), block.get("id"), block.get("name"), "".join(tool["json"]),
                block.get("input")))
        if self._thinking:
            self.ex.extra["thinking"] = "".join(self._thinking)


class AnthropicAdapter(HTTPAdapter):
    protocol = "anthropic"
    endpoint = "/messages"
    decoder = AnthropicStreamDecoder
    wire_names: ClassVar[dict[str, str]] = {"stop": "stop_sequences"}

    def _protocol_headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": self.target.anthropic_version}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def build_body(self, request: ChatRequest, skip: frozenset[str] | set[str] = frozenset()
                   ) -> tuple[dict[str, Any], list[str]]:
        notes = []
        body: dict[str, Any] = {"model": self.target.model, "max_tokens": request.max_tokens}
        if request.system is not None:
            body["system"] = request.system
        body["messages"] = request.messages
        body.update(self._sampling(request, skip))
        if request.tools is not None:
            body["tools"] = [anthropic_tool(tool) for tool in request.tools]
        if request.tool_choice is not None:
            body["tool_choice"] = anthropic_tool_choice(request.tool_choice)
        if request.json_schema is not None:
            body["output_config"] = {"format": {"type": "json_schema",
                                                "schema": request.json_schema.get("schema", {})}}
        elif request.json_object:
            notes.append("json_object has no Anthropic equivalent: not sent")
        body["stream"] = request.stream
        return merge_extra(body, request.extra), notes

    def parse_body(self, ex: Exchange, body: dict[str, Any]) -> None:
        if ex.request_id is None and isinstance(body.get("id"), str):
            ex.request_id = body["id"]
        ex.response_model = body.get("model")
        ex.finish_reason = body.get("stop_reason")
        if body.get("stop_sequence") is not None:
            ex.extra["stop_sequence"] = body["stop_sequence"]
        if isinstance(body.get("usage"), dict):
            ex.usage = body["usage"]
            ex.service_tier = _service_tier(ex.usage)
        texts, thinking = [], []
        for block in body.get("content") or []:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if btype == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif btype in _TOOL_BLOCKS:
                ex.tool_calls.append(tool_call_record(btype, block.get("id"), block.get("name"),
                                                      None, block.get("input")))
            elif btype == "thinking" and isinstance(block.get("thinking"), str):
                thinking.append(block["thinking"])
        ex.text = "".join(texts)
        if thinking:
            ex.extra["thinking"] = "".join(thinking)

    async def count_tokens(self, request: ChatRequest) -> int | None:
        """POST /v1/messages/count_tokens; None where the endpoint has no such route or fails."""
        body: dict[str, Any] = {"model": self.target.model, "messages": request.messages}
        if request.system is not None:
            body["system"] = request.system
        if request.tools is not None:
            body["tools"] = [anthropic_tool(tool) for tool in request.tools]
        if request.tool_choice is not None:
            body["tool_choice"] = anthropic_tool_choice(request.tool_choice)
        head = self._transport.request_head("POST", f"{self._prefix}/messages/count_tokens",
                                            {**self._headers, "accept": "application/json"})
        try:
            response = await self._transport.send(head, json.dumps(body).encode())
            try:
                raw = await response.read(1 << 20)
            finally:
                await response.aclose()
            if response.status != 200:
                return None
            tokens = json.loads(raw).get("input_tokens")
        except Exception:
            return None
        return tokens if isinstance(tokens, int) else None
