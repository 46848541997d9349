"""`prober run --dry-run`: what a run would send, per target, before anything is sent.

Each probe's own `run` is walked through a context that records every request instead of sending
it and answers at once with an empty success, on an event loop whose clock jumps over waits (the
caching suite's fan-out pause, a TTL wait): so the plan is the probe's real request list, built
in well under a second, and no socket is opened, nothing is stored. Per target and suite entry:
the requests, their input tokens (estimated: a word or a punctuation mark per token, as the
emulator and the caching probe's filler sizes count) and their output tokens at most (each
request's max_tokens), and where the target's pricing gives per-token prices, the most the run
costs at the base input price. Retries are not counted. A probe that adapts to the answers (the
caching probe's minimum-prefix search, schema_order's sequential stop) is walked on the path an
empty answer takes, and where that path sends fewer requests than the progress total the probe
declares for the block (its longest path), the plan counts the total: each request it did not
walk at the largest input and output of those it walked in that block. So the plan is an upper
bound of what the run sends, retries apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import selectors
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from prober.core.config import ProberConfig, TargetConfig
from prober.core.records import ChatRequest, Exchange
from prober.emulator.tokenizer import count_tokens
from prober.suites.loader import Suite, load_suite


@dataclass
class PlannedEntry:
    """What one suite entry would send to one target."""

    target: str
    entry: str
    probe: str
    requests: int = 0
    input_tokens: int = 0
    output_tokens_max: int = 0

    def cost_usd(self, target: TargetConfig) -> float | None:
        """The most these requests cost at the target's per-token prices; None without prices."""
        pricing = target.pricing
        if pricing is None or pricing.input_usd_per_mtok is None or pricing.output_usd_per_mtok is None:
            return None
        return (self.input_tokens * pricing.input_usd_per_mtok
                + self.output_tokens_max * pricing.output_usd_per_mtok) / 1e6


def request_input_tokens(request: ChatRequest) -> int:
    """The prompt's tokens as estimated here: system, messages, tool definitions and the schema."""
    parts: list[str] = []

    def add(content: Any) -> None:
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for block in content:
                text = block.get("text") if isinstance(block, dict) else None
                parts.append(text if isinstance(text, str) else json.dumps(block))
        elif content is not None:
            parts.append(json.dumps(content))

    add(request.system)
    for message in request.messages:
        add(message.get("content"))
    if request.tools:
        parts.append(json.dumps(request.tools))
    if request.json_schema:
        parts.append(json.dumps(request.json_schema))
    return sum(count_tokens(part) for part in parts)


class RecordingContext:
    """A ProbeContext (prober/probes/base.py) that counts requests and sends none."""

    def __init__(self, target: TargetConfig, planned: PlannedEntry) -> None:
        self.target = target
        self.run_id = "dry-run"
        self.planned = planned
        # Per open progress block: [requests walked, largest input tokens, largest max_tokens].
        self._blocks: list[list[int]] = []

    async def send(self, request: ChatRequest, *, case: str, labels: dict[str, Any]) -> Exchange:
        tokens = request_input_tokens(request)
        self.planned.requests += 1
        self.planned.input_tokens += tokens
        self.planned.output_tokens_max += request.max_tokens
        if self._blocks:
            block = self._blocks[-1]
            block[0] += 1
            block[1] = max(block[1], tokens)
            block[2] = max(block[2], request.max_tokens)
        # An answer that came at once and said nothing: zero timings, no usage, no text.
        return Exchange(protocol=self.target.protocol, url="dry-run", request_body={}, request_headers={},
                        started_at=dt.datetime.now(dt.UTC), start_ns=0, status=200, headers_ns=0,
                        first_byte_ns=0, first_token_ns=0, end_ns=0, finish_reason="stop")

    async def count_tokens(self, request: ChatRequest) -> int | None:
        return None    # counting would be a request to the endpoint

    @contextlib.contextmanager
    def progress_task(self, title: str, total: int | None = None) -> Iterator[None]:
        block = [0, 0, 0]
        self._blocks.append(block)
        try:
            yield
        finally:
            self._blocks.pop()
            unwalked = max(0, (total or 0) - block[0])
            self.planned.requests += unwalked
            self.planned.input_tokens += unwalked * block[1]
            self.planned.output_tokens_max += unwalked * block[2]

    async def closed_loop(self, *, concurrency: int, count: int, make_request: Callable[[int], ChatRequest],
                          case: str, labels: dict[str, Any], title: str) -> list[Exchange]:
        return [await self.send(make_request(i), case=case, labels=labels) for i in range(count)]

    async def open_loop(self, *, offsets_s: Sequence[float], make_request: Callable[[int], ChatRequest],
                        max_concurrency: int | None, case: str, labels: dict[str, Any],
                        title: str) -> list[Exchange]:
        # When each request would go does not change what it sends: count them in order.
        return [await self.send(make_request(i), case=case, labels=labels) for i in range(len(offsets_s))]


class _VirtualClock:
    now = 0.0


class _SkippingSelector(selectors.DefaultSelector):
    """Never blocks: where the loop would wait for its next timer, the virtual clock jumps there."""

    def __init__(self, clock: _VirtualClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = super().select(0)
        if not events and timeout:
            self._clock.now += timeout
        return events


class _SkippingLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._virtual = _VirtualClock()
        super().__init__(_SkippingSelector(self._virtual))

    def time(self) -> float:
        return self._virtual.now


def plan_run(config: ProberConfig, suite_name: str, target_names: list[str] | None,
             overrides: dict[str, Any] | None = None) -> tuple[Suite, list[PlannedEntry]]:
    """Every suite entry walked against every target, in run order; nothing sent, nothing written.
    Unlike a run, unset API-key variables are no error: no key is needed to count."""
    suite = load_suite(suite_name, config.suite_paths, overrides)
    targets = [config.target(name) for name in target_names or list(config.targets)]
    planned: list[PlannedEntry] = []

    async def walk() -> None:
        for target in targets:
            for entry in suite.entries:
                planned.append(PlannedEntry(target=target.name, entry=entry.id, probe=entry.probe.name))
                await entry.probe.run(RecordingContext(target, planned[-1]), entry.params)

    loop = _SkippingLoop()
    try:
        loop.run_until_complete(walk())
    finally:
        loop.close()
    return suite, planned


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


def show_plan(console: Console, config: ProberConfig, suite: Suite, planned: list[PlannedEntry]) -> None:
    """One table per target: each suite entry's requests, tokens and (with prices) cost, and the total."""
    by_target: dict[str, list[PlannedEntry]] = {}
    for row in planned:
        by_target.setdefault(row.target, []).append(row)
    for name, rows in by_target.items():
        target = config.target(name)
        table = Table("entry", "probe", "requests", "input tokens", "output tokens (at most)", "cost (at most)",
                      title=f"dry run: suite {escape(suite.name)} against {escape(name)} (nothing sent)")
        total = PlannedEntry(target=name, entry="total", probe="")
        for row in rows:
            table.add_row(escape(row.entry), escape(row.probe), f"{row.requests:,}", f"{row.input_tokens:,}",
                          f"{row.output_tokens_max:,}", _money(row.cost_usd(target)))
            total.requests += row.requests
            total.input_tokens += row.input_tokens
            total.output_tokens_max += row.output_tokens_max
        table.add_row("total", "", f"{total.requests:,}", f"{total.input_tokens:,}", f"{total.output_tokens_max:,}",
                      _money(total.cost_usd(target)))
        console.print(table)
        if total.cost_usd(target) is None:
            console.print(f"{escape(name)}: no cost: set pricing = {{ input_usd_per_mtok = ..., "
                          f"output_usd_per_mtok = ... }} on the target to see one", soft_wrap=True)
    console.print("Input tokens are estimated (a word or a punctuation mark each); output tokens are each "
                  "request's max_tokens; retries are not counted.", soft_wrap=True)
