"""Incremental Server-Sent Events parser (the WHATWG event-stream format), pure and I/O-free.

Feed it body bytes as they arrive, split anywhere; it returns the events completed by those
bytes. Lines end in LF, CRLF or CR; `:` lines are comments (keep-alive pings) and are counted,
not returned; `data:` lines of one event are joined with newlines; an event is dispatched at a
blank line and only if it had data; unknown fields are ignored; unknown event names pass through.
"""

from __future__ import annotations

SSEEvent = tuple[str | None, str]   # (event name or None when the event had no `event:` line, data)


class SSEParser:
    __slots__ = ("_tail", "_event", "_data", "_started", "_bare_cr", "comments", "last_event_id", "retry_ms")

    def __init__(self) -> None:
        self._tail = b""                      # an unfinished line carried over to the next feed
        self._event: str | None = None
        self._data: list[bytes] | None = None
        self._started = False
        self._bare_cr = False                 # the stream ends its lines with a lone CR
        self.comments = 0
        self.last_event_id: str | None = None
        self.retry_ms: int | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        buf = self._tail + chunk if self._tail else chunk
        if not self._started and buf:
            if len(buf) < 3 and b"\xef\xbb\xbf".startswith(buf):
                self._tail = buf               # could still be a byte-order mark
                return []
            self._started = True
            if buf.startswith(b"\xef\xbb\xbf"):
                buf = buf[3:]
        hold_cr = False
        if b"\r" in buf:
            # A CR at the very end may be the first half of a CRLF: unless this stream has shown
            # that it ends lines with a bare CR, decide on the next feed.
            body = buf[:-1] if buf.endswith(b"\r") else buf
            if not self._bare_cr and body.count(b"\r") != body.count(b"\r\n"):
                self._bare_cr = True
            if len(body) < len(buf):
                hold_cr = not self._bare_cr
                if hold_cr:
                    buf = body
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        tail = lines.pop()
        self._tail = tail + b"\r" if hold_cr else tail
        events: list[SSEEvent] = []
        for line in lines:
            if not line:
                if self._data is not None:
                    data = self._data
                    text = data[0] if len(data) == 1 else b"\n".join(data)
                    events.append((self._event, text.decode("utf-8", "replace")))
                self._event = None
                self._data = None
                continue
            if line[0] == 0x3A:               # ":" comment
                self.comments += 1
                continue
            name, sep, value = line.partition(b":")
            if sep and value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                if self._data is None:
                    self._data = [value]
                else:
                    self._data.append(value)
            elif name == b"event":
                self._event = value.decode("utf-8", "replace")
            elif name == b"id":
                if b"\x00" not in value:
                    self.last_event_id = value.decode("utf-8", "replace")
            elif name == b"retry":
                if value.isdigit():
                    self.retry_ms = int(value)
        return events

    @property
    def pending(self) -> bool:
        """True when bytes of an unfinished event are held: a stream ending now was cut mid-event."""
        return bool(self._tail.strip(b"\r")) or self._data is not None or self._event is not None
