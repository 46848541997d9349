"""OpenAI Chat Completions on the server side: request parsing and response encoding.

Written from the recorded wire sample and the API reference, independently of the prober's client
adapter. A stream is `data: JSON\\n\\n` chunks: a role-only chunk, one chunk per content token, a
finish chunk with an empty delta, then (only with stream_options.include_usage) a chunk with
`choices: []` and the usage, then `data: [DONE]`. With include_usage every earlier chunk carries
`"usage": null`, as the live API does; without it chunks have no usage key at all.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from prober.emulator.plan import ErrorKind, GenRequest, InvalidRequest, PromptBlock, ResponsePlan

# kind -> (status, type, code, message)
ERRORS: dict[str, tuple[int, str, str | None, str]] = {
    "invalid_request": (400, "invalid_request_error", None, "invalid request"),
    "not_found": (404, "invalid_request_error", "unknown_url", "Unknown request URL"),
    "rate_limit": (429, "requests", "rate_limit_exceeded", "Rate limit reached for requests"),
    "overloaded": (503, "server_error", None, "The engine is currently overloaded, please try again later"),
    "server_error": (500, "server_error", None,
                     "The server had an error while processing your request. Sorry about that!"),
}
_JSON = "application/json"
_SSE = "text/event-stream; charset=utf-8"


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)   # one instance: json.dumps with
                                                                         # options builds one per call


def dumps(value: Any) -> bytes:
    return _ENCODER.encode(value).encode()


def new_request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


# --- requests ---------------------------------------------------------------------------------

def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) and part.get("type") == "text"
                       else json.dumps(part, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
                       for part in content)
    return ""


def _optional_int(data: dict[str, Any], name: str) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidRequest(f"Invalid '{name}': expected an integer greater than or equal to 1.", param=name)
    return value


def request_object(body: bytes) -> tuple[dict[str, Any], str]:
    """The JSON object of an OpenAI request body (both APIs) and its model, or InvalidRequest."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest("We could not parse the JSON body of your request.") from None
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("you must provide a model parameter", param="model")
    return data, model


def parse_request(body: bytes, request_id: str) -> GenRequest:
    data, model = request_object(body)
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("Missing required parameter: 'messages'.", param="messages")
    blocks: list[PromptBlock] = []
    for tool in data.get("tools") or []:
        blocks.append(PromptBlock("tools", json.dumps(tool, sort_keys=True, separators=(",", ":"))))
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidRequest(f"Missing required parameter: 'messages[{index}].role'.",
                                 param=f"messages[{index}].role")
        role = message["role"]
        section: Literal["system", "messages"] = "system" if role in ("system", "developer") else "messages"
        blocks.append(PromptBlock(section, _content_text(message.get("content")), role=role))
    max_tokens = _optional_int(data, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = _optional_int(data, "max_tokens")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("Invalid 'stream': expected a boolean.", param="stream")
    options = data.get("stream_options") or {}
    include_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
    return GenRequest(protocol="openai", request_id=request_id, model=model, stream=stream,
                      max_tokens=max_tokens, blocks=blocks, include_usage=include_usage, body=data)


def models_response(models: list[str]) -> bytes:
    return dumps({"object": "list",
                   "data": [{"id": name, "object": "model", "created": 1735689600, "owned_by": "prober-emulator"}
                            for name in models]})


def error_response(kind: ErrorKind, request_id: str, message: str | None = None, param: str | None = None,
                   retry_after_s: int | None = None) -> tuple[int, list[tuple[str, str]], bytes]:
    status, _, _, default_message = ERRORS[kind]
    headers = [("content-type", _JSON), ("x-request-id", request_id)]
    if retry_after_s is not None:
        headers.append(("retry-after", str(retry_after_s)))
    return status, headers, dumps(_error_body(kind, message or default_message, param))


def _error_body(kind: ErrorKind, message: str, param: str | None = None) -> dict[str, Any]:
    _, error_type, code, _ = ERRORS[kind]
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


# --- responses --------------------------------------------------------------------------------

class Encoder:
    """Renders one request's plan as a ChatCompletion or as its chunk stream."""

    def __init__(self, request: GenRequest, plan: ResponsePlan) -> None:
        self.request = request
        self.plan = plan
        self.completion_id = f"chatcmpl-{uuid.uuid4().hex[:29]}"
        self.created = int(time.time())
        # Every chunk starts with the same fields; build them once.
        head = {"id": self.completion_id, "object": "chat.completion.chunk", "created": self.created,
                "model": request.model, "system_fingerprint": plan.system_fingerprint}
        self._chunk_head = b"data: " + dumps(head)[:-1] + b',"choices":['
        self._chunk_tail = b'],"usage":null}\n\n' if request.include_usage else b"]}\n\n"
        self.tool_call_id = f"call_{uuid.uuid4().hex[:24]}"
        self._tool_call_opened = False
        self.finish_reason = plan.finish if plan.tool_name is None or plan.finish != "stop" else "tool_calls"

    def _usage(self) -> dict[str, Any]:
        usage = self.plan.usage
        fields: dict[str, Any] = {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
                                  "total_tokens": usage.input_tokens + usage.output_tokens}
        if usage.cache_read_tokens is not None:   # absent, as from vLLM without prompt-tokens details
            fields["prompt_tokens_details"] = {"cached_tokens": usage.cache_read_tokens}
        fields["completion_tokens_details"] = {"reasoning_tokens": 0}
        return fields

    def _choice_chunk(self, delta: bytes, finish_reason: str | None = None) -> bytes:
        finish = b"null" if finish_reason is None else dumps(finish_reason)
        return (self._chunk_head + b'{"index":0,"delta":' + delta + b',"logprobs":null,"finish_reason":'
                + finish + b"}" + self._chunk_tail)

    def stream_headers(self) -> list[tuple[str, str]]:
        return [("content-type", _SSE), ("cache-control", "no-cache"), ("x-request-id", self.request.request_id)]

    def json_headers(self) -> list[tuple[str, str]]:
        return [("content-type", _JSON), ("x-request-id", self.request.request_id)]

    def preamble(self) -> bytes:
        return self._choice_chunk(b'{"role":"assistant","content":"","refusal":null}')

    def token(self, text: str) -> bytes:
        if self.plan.tool_name is None:
            return self._choice_chunk(b'{"content":' + dumps(text) + b"}")
        # The call's id and name ride on its first arguments piece, so that the first chunk carrying
        # tool_calls (where TTFT is measured) leaves when the first token is due, not with the preamble.
        call: dict[str, Any] = {"index": 0, "function": {"arguments": text}}
        if not self._tool_call_opened:
            self._tool_call_opened = True
            call = {"index": 0, "id": self.tool_call_id, "type": "function",
                    "function": {"name": self.plan.tool_name, "arguments": text}}
        return self._choice_chunk(dumps({"tool_calls": [call]}))

    def malformed(self) -> bytes:
        return self._chunk_head[:len(self._chunk_head) // 2] + b"\n\n"   # JSON cut short

    def stream_error(self, kind: ErrorKind) -> bytes:
        return b"data: " + dumps(_error_body(kind, ERRORS[kind][3])) + b"\n\n"

    def _timings(self) -> dict[str, Any]:
        """llama-server's `timings` with the plan's own values: prompt_ms runs from the slot grant
        to the first token (the queue before the grant is left out, as llama-server leaves it out)."""
        plan = self.plan
        prompt_n = max(plan.usage.input_tokens - plan.cached_prompt_tokens, 0)
        prompt_ms = (plan.first_token_delay_s + plan.prefill_s) * 1000
        predicted_n = len(plan.tokens)
        predicted_ms = max(predicted_n - 1, 0) * plan.token_interval_s * 1000
        return {"cache_n": plan.cached_prompt_tokens, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
                "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
                "prompt_per_second": prompt_n * 1000 / prompt_ms if prompt_ms else 0.0,
                "predicted_n": predicted_n, "predicted_ms": predicted_ms,
                "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
                "predicted_per_second": predicted_n * 1000 / predicted_ms if predicted_ms else 0.0}

    def epilogue(self) -> bytes:
        # llama-server attaches `timings` to the last chunk: the usage chunk when there is one.
        timings = b',"timings":' + dumps(self._timings()) if self.plan.server_timings else b""
        if not self.request.include_usage:
            finish = self._choice_chunk(b"{}", self.finish_reason)
            return (finish[:-3] + timings + b"}\n\n" if timings else finish) + b"data: [DONE]\n\n"
        out = self._choice_chunk(b"{}", self.finish_reason)
        out += self._chunk_head + b'],"usage":' + dumps(self._usage()) + timings + b"}\n\n"
        return out + b"data: [DONE]\n\n"

    def message(self) -> bytes:
        return dumps({
            "id": self.completion_id, "object": "chat.completion", "created": self.created,
            "model": self.request.model,
            "choices": [{"index": 0, "message": self._message(), "logprobs": None,
                         "finish_reason": self.finish_reason}],
            "usage": self._usage(), "system_fingerprint": self.plan.system_fingerprint,
            **({"timings": self._timings()} if self.plan.server_timings else {}),
        })

    def _message(self) -> dict[str, Any]:
        if self.plan.tool_name is None:
            return {"role": "assistant", "content": self.plan.text, "refusal": None}
        call = {"id": self.tool_call_id, "type": "function",
                "function": {"name": self.plan.tool_name, "arguments": self.plan.text}}
        return {"role": "assistant", "content": None, "refusal": None, "tool_calls": [call]}

    def error(self, kind: ErrorKind) -> tuple[int, list[tuple[str, str]], bytes]:
        return error_response(kind, self.request.request_id)
