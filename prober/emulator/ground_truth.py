"""What the emulator really did with each generation request, for tests and `prober calibrate`.

Monotonic readings are `time.perf_counter_ns()`, the clock the prober's own timestamps use, so an
in-process caller can subtract them directly; wall-clock times are UTC ISO 8601.

Fields of each record:
    request_id, protocol, path, model, stream
    status              HTTP status sent (200 also for streams that later broke)
    fault               the fault injected, or None
    arrived_utc, arrived_mono_ns      request fully received (its last bytes came in from the socket)
    in_flight_at_arrival              other generation requests queued or in service then
    queue_wait_ms       time spent waiting for a slot (scheduled grant time minus arrival)
    scheduled_ttft_ms   when the first content token was due (faults aside), relative to arrival
    first_token_utc, first_token_mono_ns   first content token written to the socket
                        (non-streaming: the whole body); None if none was sent
    ttft_ms             first_token_mono_ns - arrived_mono_ns, in ms: the ground-truth TTFT
    finished_mono_ns    last byte of the response written (or connection closed)
    input_tokens, output_tokens       as reported in usage
    tokens_sent         content tokens actually written
    client_disconnected the client went away before the response was complete
    behaviours          what behaviours decided for this request, by behaviour name (ResponsePlan.truth)
                        ("cache": the prompt cache's reads, writes and misses, see caching.py)
"""

from __future__ import annotations

import datetime as dt
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any


def _utc(wall_ns: int) -> str:
    return dt.datetime.fromtimestamp(wall_ns / 1e9, dt.UTC).isoformat(timespec="microseconds")


@dataclass
class RequestTruth:
    request_id: str
    protocol: str
    path: str
    arrived_utc: str
    arrived_mono_ns: int
    in_flight_at_arrival: int
    model: str | None = None
    stream: bool | None = None
    status: int | None = None
    fault: str | None = None
    queue_wait_ms: float | None = None
    scheduled_ttft_ms: float | None = None
    first_token_utc: str | None = None
    first_token_mono_ns: int | None = None
    ttft_ms: float | None = None
    finished_mono_ns: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    tokens_sent: int = 0
    client_disconnected: bool = False
    behaviours: dict[str, Any] = field(default_factory=dict)

    def first_token_written(self) -> None:
        now_ns = time.perf_counter_ns()
        self.first_token_mono_ns = now_ns
        self.first_token_utc = _utc(time.time_ns())
        self.ttft_ms = (now_ns - self.arrived_mono_ns) / 1e6

    def finished(self) -> None:
        self.finished_mono_ns = time.perf_counter_ns()


class GroundTruth:
    """The most recent MAX_RECORDS requests' records, oldest first."""

    MAX_RECORDS = 100_000   # bounds memory for an emulator left serving for days

    def __init__(self) -> None:
        self._records: deque[RequestTruth] = deque(maxlen=self.MAX_RECORDS)

    def arrived(self, request_id: str, protocol: str, path: str, *, mono_ns: int, wall_ns: int,
                in_flight: int) -> RequestTruth:
        record = RequestTruth(request_id=request_id, protocol=protocol, path=path, arrived_utc=_utc(wall_ns),
                              arrived_mono_ns=mono_ns, in_flight_at_arrival=in_flight)
        self._records.append(record)
        return record

    def records(self) -> list[dict[str, Any]]:
        # Flat fields, and `behaviours` is never changed once set: no deep copy needed.
        return [dict(vars(record)) for record in self._records]

    def clear(self) -> None:
        self._records.clear()
