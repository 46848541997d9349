"""Every progress bar of every built-in suite has a known total (no `24/?`), and none sends more
than its total: walked without a socket through the dry run's recording context."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from prober.commands.dry_run import PlannedEntry, RecordingContext, _SkippingLoop
from prober.core.config import default_config
from prober.core.records import ChatRequest, Exchange
from prober.suites.loader import load_suite

pytestmark = pytest.mark.unit

SUITES = ["latency", "divergence", "caching", "penalty", "schema_order"]


class _BarsContext(RecordingContext):
    """Records each bar's title, total and the requests sent inside it."""

    bars: list[tuple[str, int | None, int]]

    @contextlib.contextmanager
    def progress_task(self, title: str, total: int | None = None) -> Iterator[None]:
        before = self.planned.requests
        yield
        self.bars.append((title, total, self.planned.requests - before))

    # The run shell's loops show a bar of `count` requests (prober/run/session.py): so do these.
    async def closed_loop(self, *, concurrency: int, count: int, make_request: Callable[[int], ChatRequest],
                          case: str, labels: dict[str, Any], title: str) -> list[Exchange]:
        with self.progress_task(title, count):
            return await super().closed_loop(concurrency=concurrency, count=count, make_request=make_request,
                                             case=case, labels=labels, title=title)

    async def open_loop(self, *, offsets_s: Sequence[float], make_request: Callable[[int], ChatRequest],
                        max_concurrency: int | None, case: str, labels: dict[str, Any],
                        title: str) -> list[Exchange]:
        with self.progress_task(title, len(offsets_s)):
            return await super().open_loop(offsets_s=offsets_s, make_request=make_request,
                                           max_concurrency=max_concurrency, case=case, labels=labels, title=title)


@pytest.mark.parametrize("suite_name", SUITES)
@pytest.mark.parametrize("target_name", ["emulator", "emulator-openai"])     # Messages and chat completions
def test_every_bar_has_a_total_that_bounds_it(suite_name, target_name):
    config = default_config()
    suite = load_suite(suite_name, config.suite_paths, {})
    bars: list[tuple[str, int | None, int]] = []

    async def walk() -> None:
        for entry in suite.entries:
            context = _BarsContext(config.target(target_name), PlannedEntry(target_name, entry.id, entry.probe.name))
            context.bars = bars
            await entry.probe.run(context, entry.params)

    loop = _SkippingLoop()
    try:
        loop.run_until_complete(walk())
    finally:
        loop.close()
    assert bars, f"suite {suite_name} showed no progress at all"
    assert [title for title, total, _ in bars if total is None] == []
    assert [(title, total, sent) for title, total, sent in bars if total is not None and sent > total] == []
