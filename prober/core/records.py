"""The records every layer shares: what a probe asks for, what came back, and what gets stored.

A probe describes a request in protocol-neutral terms (`ChatRequest`); a target adapter turns it
into wire bytes and returns an `Exchange`; the runner wraps the Exchange into a `Sample` with the
run's labels and hands it to the store. Summaries come back as `Metric` rows.

Times: `*_ns` fields are `time.perf_counter_ns()` readings (monotonic, for durations); the one
wall-clock field is `Exchange.started_at` (UTC). `Exchange.offsets_ms()` turns the monotonic
readings into milliseconds since the request started, which is what gets stored.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

Protocol = Literal["anthropic", "openai", "openai-responses"]

# Error types a failed Exchange can carry.
ERROR_TYPES = (
    "rate_limited",   # 429
    "overloaded",     # 529, or 503 "overloaded"
    "server_error",   # other 5xx, or an error event after HTTP 200
    "timeout",        # connect, read or total timeout
    "connection",     # refused, reset, closed before or during the response
    "protocol",       # malformed HTTP, SSE or JSON; a stream that ended without its terminal event
    "bad_request",    # 400, 404, 413, 422 and other 4xx not listed here
    "auth",           # 401, 403
    "budget",         # the run's budget was exhausted before this request could be sent
    "internal",       # prober's own code raised while sending or reading: a bug here, not the endpoint's
)

# Response headers worth keeping: request ids, rate-limit state, retry hints, server identity.
KEPT_HEADER_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")
KEPT_HEADERS = ("request-id", "x-request-id", "retry-after", "retry-after-ms", "server",
                "openai-processing-ms", "openai-version", "x-should-retry", "content-type")


@dataclass
class ChatRequest:
    """A protocol-neutral chat request, as a probe describes it.

    `messages` use the Anthropic/OpenAI common shape: {"role": "user"|"assistant", "content": str
    or a list of protocol-specific blocks}. `sampling` holds every sampling parameter the probe
    relies on (temperature, top_p, seed, frequency_penalty, ...); the adapter sends each one
    explicitly under the protocol's name for it. `extra` is merged last into the request body, for
    protocol-specific fields (cache_control on system blocks, prompt_cache_key, ...).
    """

    messages: list[dict[str, Any]]
    max_tokens: int = 128
    system: str | list[dict[str, Any]] | None = None
    stream: bool = True
    sampling: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    # {"name": ..., "schema": {...}, "strict": bool} -> response_format (OpenAI) / output_config (Anthropic)
    json_schema: dict[str, Any] | None = None
    json_object: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    # What the probe wants kept with every attempt in the sample's `extra` and never sent (the
    # lengths a request shape drew for it, so that the run can be replayed).
    stored_extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Exchange:
    """One request and what came back."""

    protocol: Protocol
    url: str
    request_body: dict[str, Any]
    request_headers: dict[str, str]          # already redacted: no API keys
    started_at: dt.datetime                  # UTC wall clock, just before the request bytes are written
    start_ns: int                            # perf_counter_ns at the same moment
    stream: bool = True
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    request_id: str | None = None
    system_fingerprint: str | None = None
    response_model: str | None = None
    # The tier that served the request as the response says ("default", "flex", "priority";
    # Anthropic: usage.service_tier), where it says one: a drift in it explains a latency drift.
    service_tier: str | None = None
    text: str = ""
    # Structured output: tool_use inputs (Anthropic) or tool_calls (OpenAI), as parsed JSON or raw text.
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    # Usage exactly as the wire reported it: a field that was absent stays absent.
    usage: dict[str, Any] | None = None
    headers_ns: int | None = None
    # When the connection this attempt opened was established (None on a reused one): an open
    # loop leaves out of its send lag the part of a connect that ran past the request's due time.
    connected_ns: int | None = None
    first_byte_ns: int | None = None
    first_token_ns: int | None = None
    first_answer_ns: int | None = None       # first answer token after any reasoning (ttft_answer)
    chunk_ns: list[int] = field(default_factory=list)      # each content-bearing chunk's arrival
    chunk_chars: list[int] = field(default_factory=list)   # characters of content in each such chunk
    end_ns: int | None = None
    error_type: str | None = None
    error_message: str | None = None
    attempt: int = 1
    # Non-conformance against the official SDK types, and other wire oddities; never fatal.
    findings: list[str] = field(default_factory=list)
    # Parameters the endpoint rejected and the adapter retried without (e.g. temperature on Opus 4.7).
    rejected_params: list[str] = field(default_factory=list)
    # Wire payloads as text: (SSE event name, its data) or (None, the body), kept in memory for
    # conformance checks until the sample writer takes them with the sample (the exchange a probe
    # gets back has none). Text, not parsed JSON: strings cost the garbage collector nothing.
    raw_events: list[tuple[str | None, Any]] = field(default_factory=list, repr=False)
    extra: dict[str, Any] = field(default_factory=dict)    # protocol-specific leftovers (timings, logprobs)

    @property
    def ok(self) -> bool:
        return self.error_type is None

    def _offset(self, ns: int | None) -> float | None:
        return None if ns is None else (ns - self.start_ns) / 1e6

    @property
    def ttft_ms(self) -> float | None:
        return self._offset(self.first_token_ns)

    @property
    def ttft_answer_ms(self) -> float | None:
        return self._offset(self.first_answer_ns)

    @property
    def e2e_ms(self) -> float | None:
        return self._offset(self.end_ns)

    def offsets_ms(self) -> dict[str, Any]:
        return {
            "headers_ms": self._offset(self.headers_ns),
            "first_byte_ms": self._offset(self.first_byte_ns),
            "ttft_ms": self.ttft_ms,
            "ttft_answer_ms": self.ttft_answer_ms,
            "end_ms": self.e2e_ms,
            "chunk_offsets_ms": [round((ns - self.start_ns) / 1e6, 3) for ns in self.chunk_ns],
        }


@dataclass
class Sample:
    """An Exchange as stored: with the run, target, probe, case and parameter labels."""

    run_id: str
    target: str
    probe: str
    case: str
    labels: dict[str, Any]
    exchange: Exchange
    # Retries are data: every attempt is a Sample. `request_index` groups the attempts of one
    # logical request within a run; `final` marks the attempt whose outcome counts.
    request_index: int = 0
    final: bool = True
    entry: str | None = None   # the suite entry that sent it (two entries of one probe stay apart)


@dataclass
class Metric:
    run_id: str
    target: str
    probe: str
    name: str
    value: float | None
    labels: dict[str, Any] = field(default_factory=dict)
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None
    unit: str | None = None
    entry: str | None = None
    # Why this value must never be judged (by an SLO or a drift test), e.g. ["interval_unbounded"]
    # for a percentile whose sample is too small for its 95% interval; None or empty: judge it.
    flags: list[str] | None = None


def label_text(labels: dict[str, Any] | None, skip: Iterable[str] = ()) -> str:
    """`key=value, ...` in key order, for people (never a Python repr); a label whose value is None
    (not applicable to the cell, as a penalty baseline's penalty_value) is left out rather than
    shown as Python's "None"."""
    skipped = set(skip)
    return ", ".join(f"{k}={v}" for k, v in sorted((labels or {}).items()) if k not in skipped and v is not None)


def labels_key(labels: dict[str, Any] | None) -> str:
    """A stable text form of a metric's label set: alert identities and report series key on it."""
    try:
        # A drift evaluation keys a quarter million rows on a few hundred label sets: remembered.
        # The type goes into the cache key, so that 1 and True (equal in Python) stay apart.
        return _labels_key_of(tuple((key, type(value), value) for key, value in (labels or {}).items()))
    except TypeError:                                   # an unhashable value (a list): computed each time
        return json.dumps(labels or {}, sort_keys=True, separators=(",", ":"), default=str)


@functools.lru_cache(maxsize=4096)
def _labels_key_of(items: tuple[tuple[str, type, Any], ...]) -> str:
    return json.dumps({key: value for key, _, value in items}, sort_keys=True, separators=(",", ":"), default=str)


RunStatus = Literal["running", "complete", "interrupted", "failed"]


@dataclass
class Run:
    id: str
    suite: str
    started_at: dt.datetime
    prober_version: str
    config_hash: str
    host: str
    pid: int
    status: RunStatus = "running"
    finished_at: dt.datetime | None = None
    targets: list[str] = field(default_factory=list)
    # Event-loop lag seen by the client during the run (ms): p50, p99, max, and whether latency
    # results should be distrusted because the client itself was saturated.
    loop_lag: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    # The process running it renews this while it runs (prober.run.lease); once it has passed, the run
    # is stale on whichever host looks.
    lease_expires_at: dt.datetime | None = None
    # Where the run probed from: baselines, drift and SLOs group by (target, site).
    site: str = ""
    # The scheduled night this run belongs to when a fleet is split into shards (`--batch`).
    batch: str | None = None


def default_site(host: str) -> str:
    """The site a run gets when none is configured: the first label of the host name."""
    return host.split(".", 1)[0] or host


def completed_targets(run: dict[str, Any]) -> list[str]:
    """The targets that completed in a run (a run stored before per-target status: all of its
    targets when the run completed)."""
    recorded = run.get("target_status") or {}
    if recorded:
        return [target for target, state in recorded.items() if state["status"] == "complete"]
    return list(run.get("targets") or []) if run.get("status") == "complete" else []


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def new_run_id() -> str:
    """Twelve hex digits that no CSV reader takes for a number.

    About 0.8% of random hex ids are all digits ("604213889517") or digits around one `e`
    ("6157350e3333", which pandas and spreadsheets read as infinity), so an exported run id would
    come back as a number; such draws are discarded."""
    while True:
        run_id = uuid.uuid4().hex[:12]
        try:
            float(run_id)
        except ValueError:
            return run_id


class SampleRow(TypedDict, total=False):
    """A stored sample as `store.Store.samples` returns it (prober/store/schema.py, table `samples`;
    prober/store/rows.py builds it from a Sample). total=False: a reader can also be handed a row built
    before storage with only the columns it reads (the caching probe's usage readers, tests)."""

    id: int
    run_id: str
    target: str
    probe: str
    case: str
    labels: dict[str, Any]
    request_index: int
    attempt: int
    final: bool
    protocol: str
    url: str
    request_body: dict[str, Any] | None
    request_headers: dict[str, Any] | None
    stream: bool
    http_status: int | None
    response_headers: dict[str, Any] | None
    request_id: str | None
    system_fingerprint: str | None
    response_model: str | None
    service_tier: str | None
    output_text: str | None
    output_sha256: str
    output_chars: int
    output_truncated: bool
    tool_calls: list[dict[str, Any]] | None
    finish_reason: str | None
    usage: dict[str, Any] | None
    started_at: dt.datetime
    headers_ms: float | None
    first_byte_ms: float | None
    ttft_ms: float | None
    ttft_answer_ms: float | None
    end_ms: float | None
    chunk_offsets_ms: list[float] | None
    chunk_chars: list[int] | None
    error_type: str | None
    error_message: str | None
    findings: list[str] | None
    rejected_params: list[str] | None
    extra: dict[str, Any] | None
    entry: str | None
