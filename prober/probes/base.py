"""What a probe family is, and what the runner offers it.

A probe builds requests and decides what its samples mean. It never opens a socket: it sends
through the `ProbeContext` the runner gives it, which applies the target's rate limit, retries,
the run budget and progress, and stores every attempt. After the run, `summarize` turns the stored
sample rows (`SampleRow`s as returned by `store.Store.samples`) into Metric rows; because it reads
stored rows, a past run can be re-summarized. The class also declares how its results are shown and
judged (`charts`, `examples`, `metric_families`, prober/core/declarations.py), and is found by name
through the `prober.probes` entry-point group (prober/core/probe_registry.py; pyproject.toml lists the
built-ins), so a probe family is one module, its suite file and its tests.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from prober.core import stats
from prober.core.config import TargetConfig
from prober.core.declarations import Chart, MetricFamily, NotableSample
from prober.core.probe_registry import probe_class
from prober.core.records import ChatRequest, Exchange, Metric, SampleRow


class ProbeParams(BaseModel):
    """Base of every probe's parameter model: unknown keys in a suite file are errors."""

    model_config = ConfigDict(extra="forbid")


class ProbeContext(Protocol):
    target: TargetConfig
    run_id: str

    async def send(self, request: ChatRequest, *, case: str, labels: dict[str, Any]) -> Exchange:
        """Send one logical request (retried as configured); returns the final attempt."""

    async def count_tokens(self, request: ChatRequest) -> int | None:
        """Input tokens of `request` as the endpoint counts them (Anthropic's count_tokens route);
        None where the endpoint has no way to count. Nothing is stored."""

    def progress_task(self, title: str, total: int | None = None) -> AbstractContextManager[None]:
        """Show progress under `title` (a bar on a terminal, a line when done otherwise): every
        request sent inside the block, by this task or tasks it starts there, counts once, failed
        ones apart. `total`: the requests expected, None when not known in advance."""

    async def closed_loop(self, *, concurrency: int, count: int, make_request: Callable[[int], ChatRequest],
                          case: str, labels: dict[str, Any], title: str) -> list[Exchange]:
        """`count` requests with `concurrency` workers, each sending its next request as soon as
        the previous one finished. `make_request(i)` builds request i. The runner records the
        client's event-loop lag over the loop's duration and reports it with the same labels;
        progress is shown under `title`."""

    async def open_loop(self, *, offsets_s: Sequence[float], make_request: Callable[[int], ChatRequest],
                        max_concurrency: int | None, case: str, labels: dict[str, Any],
                        title: str) -> list[Exchange]:
        """Open-loop load: request i (built by `make_request(i)`) is sent at the loop's start +
        `offsets_s[i]` seconds whatever the earlier ones are doing (prober/probes/arrivals.py makes
        schedules). With `max_concurrency`, a request due while that many are in flight waits for
        one to finish. Each stored attempt's `extra` carries `scheduled_offset_ms`, `send_lag_ms`
        (when it was sent minus when it was due, the cap's wait and a new connection's connect
        time excluded: the client's own delay),
        `inflight_at_send` and, where the cap held it back, `concurrency_wait_ms`. The event-loop
        lag over the loop is reported as for `closed_loop`. Returns the final attempts in index
        order; progress is shown under `title`."""


# The share of requests that failed, as every probe that counts them declares it: a rise is a
# regression, and an error is an error wherever it happens, so every cell of a run is pooled.
ERROR_RATE = MetricFamily("error_rate", "share", bad_direction=1, pool_every_label=True)

P = TypeVar("P", bound=ProbeParams)
Timing = Literal["measured", "overlap", "none"]


class Probe(abc.ABC, Generic[P]):
    """A probe family, generic over its parameter model P: `run` and `summarize` receive the
    validated `Params` instance."""

    name: ClassVar[str]
    # Bump when a change makes tonight's metrics incomparable with last night's for the same
    # parameters (what is sent, what is counted, how a metric is computed): drift baselines only
    # take runs of the same version. Refactors and new metrics leave it alone.
    version: ClassVar[int] = 1
    # The model P itself, for validating a suite entry (a ClassVar cannot name a type variable).
    Params: ClassVar[type[ProbeParams]]
    # Every metric name `summarize` can produce, known without running anything (SLO rules are
    # checked against them at load). None: not declared (SLO rules on it go unchecked).
    metric_names: ClassVar[frozenset[str] | None] = None
    # List parameters whose items become a metric label ({"levels": "concurrency"}): two runs
    # whose lists differ are still comparable at the items both have, since their metrics are
    # matched by that label; so these parameters do not decide comparability.
    label_params: ClassVar[dict[str, str]] = {}
    # How the drift tests judge the metrics (prober/core/declarations.py): the families that are not a
    # plain share, or that have a bad direction or their own pooling. A share-shaped metric left
    # out is still tested night by night, as a family whose moves are notices.
    metric_families: ClassVar[tuple[MetricFamily, ...]] = ()
    # Labels whose cells are pooled into one value per run and family: what stays is what the
    # family is about (a latency sweep pools its concurrency levels, a penalty setting its grid).
    pooled_labels: ClassVar[frozenset[str]] = frozenset()
    # What of the endpoint's timing the metrics depend on: "measured" (TTFT, ITL, a cache hit's
    # speed-up), "overlap" (only which requests are in flight together, as a batch is), or "none".
    # An emulator target keeps the scenario's timing for "measured" and compresses it for the
    # others, which changes nothing they measure (prober/run/runner.py).
    timing: ClassVar[Timing] = "measured"

    @abc.abstractmethod
    async def run(self, ctx: ProbeContext, params: P) -> None:
        """Sample the endpoint; every Exchange goes to the store through ctx."""

    @abc.abstractmethod
    def summarize(self, samples: Sequence[SampleRow], params: P, *, run_id: str,
                  target: str) -> list[Metric]:
        """Turn stored samples of one target into metrics."""

    def charts(self, latest: Sequence[dict[str, Any]]) -> list[Chart]:
        """The charts of this probe's report section, given the latest run's metric rows of one
        target; the report leaves out a chart none of whose metrics is there. The rows' labels
        may be shared between rows: read them, do not change them."""
        return []

    def examples(self, samples: Sequence[SampleRow]) -> list[NotableSample]:
        """Stored outputs worth a human look among one run's successful final samples of one
        target, most telling first; the report shows the first few, and failed requests itself.
        Rows with the same JSON (labels, request bodies) may share it: read it, do not change it."""
        return []


class MetricCollector:
    """The metrics of one `summarize` call, each stamped with the run, the target and the probe."""

    def __init__(self, *, run_id: str, target: str, probe: str) -> None:
        self.run_id, self.target, self.probe = run_id, target, probe
        self.metrics: list[Metric] = []

    def add(self, name: str, value: float | None, labels: dict[str, Any], n: int | None = None,
            unit: str | None = None, ci: tuple[float | None, float | None] = (None, None),
            flags: list[str] | None = None) -> None:
        declared = getattr(probe_class(self.probe), "metric_names", None)
        if declared is not None and name not in declared:
            # A bug in the probe: SLO rules on this name would be refused at load.
            raise ValueError(f"probe {self.probe} produced metric {name!r}, which its metric_names does not declare")
        self.metrics.append(Metric(run_id=self.run_id, target=self.target, probe=self.probe, name=name,
                                   value=None if value is None else float(value), labels=labels,
                                   ci_low=ci[0], ci_high=ci[1], n=n, unit=unit, flags=flags))

    def share(self, name: str, successes: int, n: int, labels: dict[str, Any]) -> None:
        """A proportion with its Wilson 95% interval (docs/measurement-conventions.md: every proportion carries one)."""
        value, low, high = stats.proportion(successes, n)
        self.add(name, value, labels, n, "ratio", (low, high))

    def percentile(self, name: str, values: Sequence[float], q: float, labels: dict[str, Any],
                   unit: str | None) -> None:
        """A percentile with its distribution-free 95% interval (docs/measurement-conventions.md: every percentile
        carries one); each value must be an independent unit, normally one per request."""
        self.estimate(name, stats.percentile_interval(values, q), labels, unit)

    def estimate(self, name: str, estimate: stats.PercentileEstimate, labels: dict[str, Any],
                 unit: str | None) -> None:
        """A percentile estimate as a metric row; flagged, so that nothing judges it, when its
        sample cannot bound the interval (p99 of 32 requests)."""
        flags = estimate.flags if estimate.value is not None else None
        self.add(name, estimate.value, labels, estimate.n, unit, (estimate.low, estimate.high), flags)
