"""A real local HTTP receiver for alert sinks: records every POST (path, headers, raw body) and
answers with the status the test sets (200, or 503 to play a receiver that is down).

    with Receiver() as receiver:          # http://127.0.0.1:PORT
        receiver.status = 503
        ...
        receiver.requests                 # [ReceivedRequest(path, headers, body), ...]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.threaded_http import ThreadedHTTP


@dataclass
class ReceivedRequest:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    def __init__(self) -> None:
        self.status = 200
        self.requests: list[ReceivedRequest] = []
        self.refused: int = 0       # POSTs answered with a non-2xx status
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                status = receiver.status
                if 200 <= status < 300:
                    receiver.requests.append(ReceivedRequest(self.path, {k.lower(): v for k, v in self.headers.items()},
                                                             body))
                else:
                    receiver.refused += 1
                self.send_response(status)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadedHTTP(Handler)

    @property
    def url(self) -> str:
        return self._http.url

    def __enter__(self) -> Receiver:
        self._http.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._http.__exit__(*exc_info)
