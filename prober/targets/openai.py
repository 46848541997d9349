"""OpenAI Chat Completions: POST {base}/v1/chat/completions (base may already end in /v1)."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from prober.core.records import ChatRequest, Exchange
from prober.targets.adapter import (
    HTTPAdapter,
    StreamDecoder,
    merge_extra,
    tool_call_record,
)


def openai_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as OpenAI wants it; an Anthropic-style tool ({name, input_schema}) is converted."""
    if "input_schema" in tool and tool.get("type") in (None, "custom"):
        function = {"name": tool.get("name")}
        if "description" in tool:
            function["description"] = tool["description"]
        function["parameters"] = tool["input_schema"]
        if "strict" in tool:
            function["strict"] = tool["strict"]
        return {"type": "function", "function": function}
    return tool


def openai_tool_choice(choice: Any) -> Any:
    """"auto" | "none" | "required" | "any" | {"name": ...} | an OpenAI or Anthropic dict."""
    if isinstance(choice, str):
        return {"any": "required"}.get(choice, choice)
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind in ("auto", "none"):
            return kind
        if kind == "any":
            return "required"
        if kind in ("tool", None) and "name" in choice:
            return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _system_message(system: str | list[dict[str, Any]]) -> dict[str, Any]:
    if isinstance(system, str):
        return {"role": "system", "content": system}
    # Anthropic-style blocks: keep the text parts, drop Anthropic-only keys (cache_control).
    parts = [{"type": "text", "text": block.get("text", "")} for block in system
             if isinstance(block, dict) and block.get("type", "text") == "text"]
    return {"role": "system", "content": parts}


class OpenAIStreamDecoder(StreamDecoder):
    """Chunks with choices[].delta, a finish chunk, with include_usage a usage chunk
    (choices == []), then `data: [DONE]`. TTFT at the first chunk with non-empty content, tool-call
    arguments, refusal or reasoning content; the role-only first chunk and a tool-call delta that
    only names the function do not count (the same event as Anthropic's first partial_json:
    docs/measurements-definitions.md). The answer's TTFT at the first such chunk with content,
    arguments or refusal, after any reasoning."""

    terminal_name = "[DONE]"

    def __init__(self, exchange: Exchange) -> None:
        super().__init__(exchange)
        self._tools: dict[Any, dict[str, Any]] = {}
        self._last_tool: dict[str, Any] | None = None
        self._refusal: list[str] = []
        self._reasoning: list[str] = []
        self._logprobs: list[Any] = []
        self._model_seen = False

    def feed(self, event: str | None, data: str, ns: int) -> None:
        if data == "[DONE]":
            self.ex.raw_events.append((event, data))
            self.done = True
            self.end_ns = ns
            return
        obj = self._decode(event, data, ns)
        if obj is None:
            return
        ex = self.ex
        if obj.get("error") is not None or event == "error":
            self._error_event(obj, ns)
            return
        if not self._model_seen:
            self._take_identity(obj)
        fingerprint = obj.get("system_fingerprint")
        if fingerprint is not None:
            ex.system_fingerprint = fingerprint
        usage = obj.get("usage")
        if usage is not None:
            ex.usage = usage
            tier = obj.get("service_tier")      # the usage chunk closes the stream: its tier is final
            if isinstance(tier, str) and tier:
                ex.service_tier = tier
        if "timings" in obj:
            ex.extra["timings"] = obj["timings"]
        choices = obj.get("choices")
        if not choices or type(choices) is not list:
            return
        for choice in choices:
            if type(choice) is not dict:
                continue
            if choice.get("index", 0) != 0:
                ex.extra["other_choices"] = True     # n > 1 is not measured; say it happened
                continue
            delta = choice.get("delta")
            if delta and type(delta) is dict:
                chars = 0
                content = delta.get("content")
                if content and type(content) is str:
                    self._text.append(content)
                    chars = len(content)
                    bearing = answer = True
                else:
                    bearing = answer = False
                if len(delta) > 1 or not bearing:      # the common {"content": "..."} stops here
                    other = self._other_deltas(delta)
                    if other is not None:
                        chars += other[0]
                        bearing = True
                        answer = answer or other[1]
                if bearing:
                    if ex.first_token_ns is None:
                        ex.first_token_ns = ns
                    if answer and ex.first_answer_ns is None:
                        ex.first_answer_ns = ns
                    ex.chunk_ns.append(ns)
                    ex.chunk_chars.append(chars)
            finish_reason = choice.get("finish_reason")
            if finish_reason is not None:
                ex.finish_reason = finish_reason
            logprobs = choice.get("logprobs")
            if logprobs and type(logprobs) is dict and isinstance(logprobs.get("content"), list):
                self._logprobs.extend(logprobs["content"])

    def _take_identity(self, obj: dict[str, Any]) -> None:
        """Model, id and service tier from the first chunk that names a model. Azure OpenAI's first
        chunk carries only prompt_filter_results, with "" for id and model: not an identity."""
        model = obj.get("model")
        if not model or type(model) is not str:
            return
        self._model_seen = True
        ex = self.ex
        ex.response_model = model
        call_id = obj.get("id")
        if ex.request_id is None and call_id and isinstance(call_id, str):
            ex.request_id = call_id
        tier = obj.get("service_tier")
        if isinstance(tier, str) and tier:
            ex.service_tier = tier

    def _other_deltas(self, delta: dict[str, Any]) -> tuple[int, bool] | None:
        """(characters of tool-call arguments, refusal and reasoning content in a delta, whether
        any of it is the answer rather than reasoning); None when it has none."""
        chars = 0
        bearing = answer = False
        tool_calls = delta.get("tool_calls")
        if tool_calls and isinstance(tool_calls, list):
            tool_chars = self._tool_deltas(tool_calls)
            chars += tool_chars
            bearing = answer = bool(tool_chars)
        refusal = delta.get("refusal")
        if refusal and isinstance(refusal, str):
            self._refusal.append(refusal)
            chars += len(refusal)
            bearing = answer = True
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning and isinstance(reasoning, str):
            self._reasoning.append(reasoning)
            chars += len(reasoning)
            bearing = True
        return (chars, answer) if bearing else None

    def _tool_deltas(self, tool_calls: list[Any]) -> int:
        """Argument characters in these tool-call deltas. A delta with none (one that only names
        the function, or an empty one) is not a content chunk: the tool call's first token is its
        first argument text, as on Anthropic (docs/measurements-definitions.md)."""
        chars = 0
        for call in tool_calls:
            if not isinstance(call, dict):
                continue
            slot = self._tool_slot(call)
            if call.get("id"):
                slot["id"] = call["id"]
            if call.get("type"):
                slot["type"] = call["type"]
            function = call.get("function")
            if isinstance(function, dict):
                if function.get("name"):
                    slot["name"] = (slot["name"] or "") + function["name"]
                arguments = function.get("arguments")
                if isinstance(arguments, str) and arguments:
                    slot["args"].append(arguments)
                    chars += len(arguments)
        return chars

    def _tool_slot(self, call: dict[str, Any]) -> dict[str, Any]:
        """The call a delta continues. Some servers leave `index` out: then a delta with a new id
        starts a call and one without an id (or with the same id) continues the latest, instead
        of each delta becoming a call of its own."""
        index = call.get("index")
        if index is None:
            call_id = call.get("id")
            last = self._last_tool
            if last is not None and (not call_id or last["id"] in (None, call_id)):
                return last
            index = ("unindexed", len(self._tools))
        slot = self._tools.get(index)
        if slot is None:
            slot = self._tools[index] = {"id": None, "type": "function", "name": None, "args": []}
        self._last_tool = slot
        return slot

    def finish(self) -> None:
        super().finish()
        ex = self.ex
        for slot in self._tools.values():
            ex.tool_calls.append(tool_call_record(slot["type"], slot["id"], slot["name"],
                                                  "".join(slot["args"])))
        if self._refusal:
            ex.extra["refusal"] = "".join(self._refusal)
        if self._reasoning:
            ex.extra["reasoning"] = "".join(self._reasoning)
        if self._logprobs:
            ex.extra["logprobs"] = self._logprobs


# The refusal that asks for the other field ("Unsupported parameter: 'max_tokens' is not supported
# with this model. Use 'max_completion_tokens' instead."), and not a message that merely names both
# fields, as vLLM's context-length error does ("'max_tokens' or 'max_completion_tokens' is too
# large: 4096 ..."): resending that one in the other field would fail the same way.
_USE_MAX_COMPLETION_TOKENS = re.compile(r"\buse\W{0,3}max_completion_tokens\b", re.IGNORECASE)


class OpenAIAdapter(HTTPAdapter):
    protocol = "openai"
    endpoint = "/chat/completions"
    decoder = OpenAIStreamDecoder
    wire_names: ClassVar[dict[str, str]] = {"stop_sequences": "stop"}

    # Newer hosted models refuse `max_tokens` ("Use 'max_completion_tokens' instead"); older servers
    # and most self-hosted ones know only `max_tokens`. Start with the widely understood name and
    # switch, for this endpoint, on that refusal.
    max_tokens_field = "max_tokens"

    def _protocol_headers(self, api_key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def _reshape_after(self, ex: Exchange) -> str | None:
        message = ex.error_message or ""
        if ex.status == 400 and self.max_tokens_field == "max_tokens" and _USE_MAX_COMPLETION_TOKENS.search(message):
            self.max_tokens_field = "max_completion_tokens"
            return f"max_tokens rejected, resent as max_completion_tokens: {message}"
        return None

    def build_body(self, request: ChatRequest, skip: frozenset[str] | set[str] = frozenset()
                   ) -> tuple[dict[str, Any], list[str]]:
        body: dict[str, Any] = {"model": self.target.model, self.max_tokens_field: request.max_tokens}
        messages = request.messages
        if request.system is not None:
            messages = [_system_message(request.system), *messages]
        body["messages"] = messages
        body.update(self._sampling(request, skip))
        if request.tools is not None:
            body["tools"] = [openai_tool(tool) for tool in request.tools]
        if request.tool_choice is not None:
            body["tool_choice"] = openai_tool_choice(request.tool_choice)
        if request.json_schema is not None:
            schema = request.json_schema
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": schema.get("name", "output"), "schema": schema.get("schema", {}),
                "strict": schema.get("strict", True)}}
        elif request.json_object:
            body["response_format"] = {"type": "json_object"}
        body["stream"] = request.stream
        if request.stream:
            body["stream_options"] = {"include_usage": True}
        return merge_extra(body, request.extra), []

    def parse_body(self, ex: Exchange, body: dict[str, Any]) -> None:
        if ex.request_id is None and isinstance(body.get("id"), str):
            ex.request_id = body["id"]
        ex.response_model = body.get("model")
        ex.system_fingerprint = body.get("system_fingerprint")
        if isinstance(body.get("service_tier"), str):
            ex.service_tier = body["service_tier"]
        if body.get("usage") is not None:
            ex.usage = body["usage"]
        if "timings" in body:
            ex.extra["timings"] = body["timings"]
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return
        choice = choices[0]
        ex.finish_reason = choice.get("finish_reason")
        message = choice.get("message")
        if isinstance(message, dict):
            if isinstance(message.get("content"), str):
                ex.text = message["content"]
            for call in message.get("tool_calls") or []:
                if isinstance(call, dict):
                    function = named if isinstance(named := call.get("function"), dict) else {}
                    ex.tool_calls.append(tool_call_record(call.get("type", "function"), call.get("id"),
                                                          function.get("name"), function.get("arguments")))
            if message.get("refusal"):
                ex.extra["refusal"] = message["refusal"]
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            if reasoning:
                ex.extra["reasoning"] = reasoning
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
            ex.extra["logprobs"] = logprobs["content"]
