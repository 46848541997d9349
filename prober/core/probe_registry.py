"""The installed probes, found by name.

Every probe, built-in or from another package, registers in the `prober.probes` entry-point group
of its distribution (name: the probe's name in suite files; value: `module:Class`), so a suite
file can name a probe from any installed package, and the runner, the reports and the drift tests
find it without importing probe modules themselves. The group is read once per process; a probe's
module is imported when the probe is first asked for.

An installation that cannot be trusted to mean one thing is a configuration error (exit 2) naming
the distribution: two distributions claiming one name, a plugin that fails to import, or an entry
whose class calls itself by another name.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from prober.core.declarations import MetricFamily
from prober.core.errors import ConfigError

if TYPE_CHECKING:
    from prober.probes.base import Probe

GROUP = "prober.probes"

# Added by the runner beside every measured loop (prober/run/runner.py, client honesty).
RUNNER_METRIC_NAMES = frozenset({"client_loop_lag_p99_ms", "client_saturated"})


def _distribution(entry: EntryPoint) -> str:
    dist = entry.dist
    return f"{dist.name} {dist.version}" if dist is not None else "an unnamed distribution"


@functools.cache
def _entries() -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for entry in entry_points(group=GROUP):
        if entry.name in found:
            first = found[entry.name]
            raise ConfigError(f"probe {entry.name!r} is registered twice ({GROUP} entry points): by "
                              f"{_distribution(first)} ({first.value}) and by {_distribution(entry)} "
                              f"({entry.value}); uninstall one of them")
        found[entry.name] = entry
    return found


def probe_names() -> list[str]:
    """Every installed probe's name, without importing any probe."""
    return sorted(_entries())


@functools.cache
def probe_class(name: str) -> type[Probe[Any]] | None:
    """The class registered as probe `name`, None when no installed distribution registers it."""
    entry = _entries().get(name)
    if entry is None:
        return None
    try:
        cls = entry.load()
    except Exception as exc:   # whatever a plugin's import raises, the user gets one line naming it
        raise ConfigError(f"probe {name!r} from {_distribution(entry)} failed to load ({entry.value}): "
                          f"{type(exc).__name__}: {exc}") from None
    if not isinstance(cls, type) or getattr(cls, "name", None) != name:
        raise ConfigError(f"probe {name!r} from {_distribution(entry)}: {entry.value} is not a probe class "
                          f"named {name!r}")
    return cls


def find_probe(name: str) -> Probe[Any] | None:
    """Probe `name`, None when it is not installed (a report of runs by a since removed plugin)."""
    cls = probe_class(name)
    return cls() if cls is not None else None


def get_probe(name: str) -> Probe[Any]:
    probe = find_probe(name)
    if probe is None:
        # No probe at all: prober runs from a tree whose metadata lacks the group (not installed,
        # or installed before the entry points were added).
        available = (", ".join(probe_names())
                     or f"none: no {GROUP} entry points, reinstall llm-prober (pip install -e .)")
        raise KeyError(f"unknown probe {name!r} (available: {available})")
    return probe


def all_metric_names() -> set[str] | None:
    """Every metric name an installed probe can produce, plus the runner's own client-honesty
    metrics; None when some probe does not declare its names (then nothing can be ruled out)."""
    names = set(RUNNER_METRIC_NAMES)
    for name in probe_names():
        declared = getattr(probe_class(name), "metric_names", None)
        if declared is None:
            return None
        names |= declared
    return names


def did_you_mean(name: str, known: Iterable[str] | None = None) -> str:
    """" (did you mean ttft_p50_ms?)": the names nearest `name` among `known` (default: every
    installed probe's metric names), for an error about an unknown metric; "" when none is near."""
    candidates = all_metric_names() if known is None else set(known)
    nearest = difflib.get_close_matches(name, sorted(candidates or ()), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(nearest)}?)" if nearest else ""


# --- what the drift tests ask of a probe's declarations (prober/core/declarations.py) -------------------

@functools.cache
def metric_family(probe: str, metric: str) -> MetricFamily | None:
    """The family probe `probe` declares under the name `metric` or as reading metric `metric`;
    None when it declares none (or is not installed)."""
    families: tuple[MetricFamily, ...] = getattr(probe_class(probe), "metric_families", ())
    return next((f for f in families if f.name == metric), None) or next(
        (f for f in families if f.reads(metric)), None)


def pooled_labels(probe: str) -> frozenset[str]:
    """The labels whose cells probe `probe` pools into one family value per run."""
    return frozenset(getattr(probe_class(probe), "pooled_labels", ()))
