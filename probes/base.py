"""What a probe family is, and what the runner offers it.

A probe builds requests and decides what its samples mean. It never opens a socket: it sends
through the `ProbeContext` the runner gives it, which applies the target's rate limit, retries,
the run budget and progress, and stores every attempt. After the run, `summarize` turns the stored
sample rows (`SampleRow`s as returned by `store.Store.samples`) into Metric rows; because it reads stored
rows, a past run can be re-summarized.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from prober import stats
from prober.config import TargetConfig
from prober.records import ChatRequest, Exchange, Metric, SampleRow


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


P = TypeVar("P", bound=ProbeParams)


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

    @abc.abstractmethod
    async def run(self, ctx: ProbeContext, params: P) -> None:
        """Sample the endpoint; every Exchange goes to the store through ctx."""

    @abc.abstractmethod
    def summarize(self, samples: Sequence[SampleRow], params: P, *, run_id: str,
                  target: str) -> list[Metric]:
        """Turn stored samples of one target into metrics."""


class MetricCollector:
    """The metrics of one `summarize` call, each stamped with the run, the target and the probe."""

    def __init__(self, *, run_id: str, target: str, probe: str) -> None:
        self.run_id, self.target, self.probe = run_id, target, probe
        self.metrics: list[Metric] = []

    def add(self, name: str, value: float | None, labels: dict[str, Any], n: int | None = None,
            unit: str | None = None, ci: tuple[float | None, float | None] = (None, None),
            flags: list[str] | None = None) -> None:
        declared = getattr(_REGISTRY.get(self.probe), "metric_names", None)
        if declared is not None and name not in declared:
            # A bug in the probe: SLO rules on this name would be refused at load.
            raise ValueError(f"probe {self.probe} produced metric {name!r}, which its metric_names does not declare")
        self.metrics.append(Metric(run_id=self.run_id, target=self.target, probe=self.probe, name=name,
                                   value=None if value is None else float(value), labels=labels,
                                   ci_low=ci[0], ci_high=ci[1], n=n, unit=unit, flags=flags))

    def share(self, name: str, successes: int, n: int, labels: dict[str, Any]) -> None:
        """A proportion with its Wilson 95% interval (DESIGN.md: every proportion carries one)."""
        value, low, high = stats.proportion(successes, n)
        self.add(name, value, labels, n, "ratio", (low, high))

    def percentile(self, name: str, values: Sequence[float], q: float, labels: dict[str, Any],
                   unit: str | None) -> None:
        """A percentile with its distribution-free 95% interval (DESIGN.md: every percentile
        carries one); each value must be an independent unit, normally one per request."""
        self.estimate(name, stats.percentile_interval(values, q), labels, unit)

    def estimate(self, name: str, estimate: stats.PercentileEstimate, labels: dict[str, Any],
                 unit: str | None) -> None:
        """A percentile estimate as a metric row; flagged, so that nothing judges it, when its
        sample cannot bound the interval (p99 of 32 requests)."""
        flags = estimate.flags if estimate.value is not None else None
        self.add(name, estimate.value, labels, estimate.n, unit, (estimate.low, estimate.high), flags)


_REGISTRY: dict[str, type[Probe[Any]]] = {}
ProbeClass = TypeVar("ProbeClass", bound=type[Probe[Any]])


def register(cls: ProbeClass) -> ProbeClass:
    _REGISTRY[cls.name] = cls
    return cls


def get_probe(name: str) -> Probe[Any]:
    _load_builtin_probes()
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise KeyError(f"unknown probe {name!r} (available: {', '.join(sorted(_REGISTRY))})") from None


def all_metric_names() -> set[str] | None:
    """Every metric name a registered probe can produce, plus the runner's own client-honesty
    metrics; None when some probe does not declare its names (then nothing can be ruled out)."""
    _load_builtin_probes()
    names = set(RUNNER_METRIC_NAMES)
    for cls in _REGISTRY.values():
        if cls.metric_names is None:
            return None
        names |= cls.metric_names
    return names


# Added by the runner beside every measured loop (prober/runner.py, client honesty).
RUNNER_METRIC_NAMES = frozenset({"client_loop_lag_p99_ms", "client_saturated"})


def _load_builtin_probes() -> None:
    """Import every module of the `probes` package, so that each family registers itself; adding a
    family is adding a module. Done lazily to keep `probes.base` free of import cycles."""
    import importlib
    import pkgutil

    import probes

    for module in pkgutil.iter_modules(probes.__path__):
        if module.name not in ("base", "prompts"):
            importlib.import_module(f"probes.{module.name}")
