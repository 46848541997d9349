"""Record raw HTTP responses (status line, headers, body bytes as framed on the wire) from a
running llama-server, for the adapter tests. The tests replay these files; they never need the
server.

    python tests/data/llama-server/record.py http://127.0.0.1:18080

Each case writes NAME.http (the raw response) and NAME.json (the request, the arrival time of
each received segment, and whether the server closed the keep-alive connection afterwards).
A plain socket is used on purpose, so that the recording does not depend on the code under test.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

HERE = Path(__file__).parent
MODEL = "SmolLM2-135M-Instruct"
MESSAGES = [{"role": "user", "content": "Name three colours, one word each."}]

CASES = {
    "openai-stream-include-usage": ("/v1/chat/completions", {
        "model": MODEL, "max_tokens": 16, "messages": MESSAGES, "temperature": 0, "seed": 1,
        "stream": True, "stream_options": {"include_usage": True}}),
    "openai-stream": ("/v1/chat/completions", {
        "model": MODEL, "max_tokens": 8, "messages": MESSAGES, "temperature": 0, "seed": 1,
        "stream": True}),
    "openai-nonstream": ("/v1/chat/completions", {
        "model": MODEL, "max_tokens": 16, "messages": MESSAGES, "temperature": 0, "seed": 1,
        "stream": False}),
    "openai-stream-error": ("/v1/chat/completions", {   # top_logprobs without logprobs: 400
        "model": MODEL, "max_tokens": 8, "messages": MESSAGES, "top_logprobs": 2,
        "stream": True, "stream_options": {"include_usage": True}}),
    "anthropic-stream": ("/v1/messages", {
        "model": MODEL, "max_tokens": 16, "system": "You are terse.", "messages": MESSAGES,
        "temperature": 0, "stream": True}),
    "anthropic-nonstream": ("/v1/messages", {
        "model": MODEL, "max_tokens": 16, "system": "You are terse.", "messages": MESSAGES,
        "temperature": 0, "stream": False}),
    "anthropic-count-tokens": ("/v1/messages/count_tokens", {
        "model": MODEL, "system": "You are terse.", "messages": MESSAGES}),
}


def _complete(data: bytes) -> bool:
    head_end = data.find(b"\r\n\r\n")
    if head_end < 0:
        return False
    head = data[:head_end].decode("latin-1").lower()
    body = data[head_end + 4:]
    if "transfer-encoding: chunked" in head:
        return body.endswith(b"0\r\n\r\n")
    for line in head.split("\r\n"):
        if line.startswith("content-length:"):
            return len(body) >= int(line.split(":", 1)[1])
    return False


def record(base: str, name: str, path: str, body: dict) -> None:
    url = urlsplit(base)
    payload = json.dumps(body).encode()
    request = (f"POST {path} HTTP/1.1\r\nhost: {url.netloc}\r\ncontent-type: application/json\r\n"
               f"accept: {'text/event-stream' if body.get('stream') else 'application/json'}\r\n"
               f"content-length: {len(payload)}\r\n\r\n").encode() + payload
    sock = socket.create_connection((url.hostname, url.port or 80), timeout=60)
    start = time.perf_counter()
    sock.sendall(request)
    received, segments = b"", []
    while not _complete(received):
        data = sock.recv(65536)
        if not data:
            break
        segments.append({"ms": round((time.perf_counter() - start) * 1000, 3), "bytes": len(data)})
        received += data
    sock.settimeout(1.0)
    try:
        closed = sock.recv(1) == b""
    except TimeoutError:
        closed = False
    sock.close()
    (HERE / f"{name}.http").write_bytes(received)
    meta = {"path": path, "request": body, "segments": segments,
            "server_closed_after_response": closed}
    (HERE / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"{name}: {len(received)} bytes in {len(segments)} segments, server closed: {closed}")


def main() -> None:
    base = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:18080"
    for name, (path, body) in CASES.items():
        record(base, name, path, body)


if __name__ == "__main__":
    main()
