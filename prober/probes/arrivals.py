"""Open-loop arrival schedules: when each request of a level is due, as offsets in seconds from the
level's start.

A schedule is a pure function of its parameters and seed, so a run can be replayed with the same
arrivals (the seed is one of the suite entry's stored parameters, and every sample stores its own
`scheduled_offset_ms`). Kinds, as `vllm bench serve` and guidellm name them:

    constant   one request every 1/rate seconds
    poisson    exponential inter-arrival times with mean 1/rate (gamma with shape 1)
    gamma      gamma inter-arrival times with shape `burstiness` and mean 1/rate: below 1 burstier
               than Poisson, above 1 more regular
"""

from __future__ import annotations

import math
import random
from typing import Literal

ArrivalKind = Literal["constant", "poisson", "gamma"]
ARRIVAL_KINDS: tuple[ArrivalKind, ...] = ("constant", "poisson", "gamma")


def sorted_positive_rates(rates: list[float]) -> list[float]:
    """The body of a `rates` parameter's validator: requests per second, each positive, sorted, once."""
    if any(rate <= 0 for rate in rates):
        raise ValueError("rates must be positive (requests per second)")
    return sorted(set(rates))


def inter_arrivals(kind: ArrivalKind, rate_rps: float, count: int, *, seed: int | str,
                   burstiness: float = 1.0) -> list[float]:
    """`count` gaps in seconds between consecutive requests."""
    if rate_rps <= 0 or burstiness <= 0:
        raise ValueError("the rate and the burstiness must be positive")
    if kind == "constant":
        return [1.0 / rate_rps] * count
    rng = random.Random(seed)
    if kind == "poisson":
        return [rng.expovariate(rate_rps) for _ in range(count)]
    return [rng.gammavariate(burstiness, 1.0 / (rate_rps * burstiness)) for _ in range(count)]


def schedule(kind: ArrivalKind, rate_rps: float, *, seed: int | str, count: int | None = None,
             duration_s: float | None = None, burstiness: float = 1.0) -> list[float]:
    """Offsets in seconds of each request from the level's start, the first at 0: `count` requests,
    or every arrival that falls within `duration_s` (exactly one of the two)."""
    if (count is None) == (duration_s is None):
        raise ValueError("give a count or a duration, not both")
    if count is None:
        assert duration_s is not None
        # Draw more gaps than the duration needs on average, then cut: the same seed gives the
        # same prefix whatever the duration, so a shorter run replays the start of a longer one.
        drawn = max(16, math.ceil(rate_rps * duration_s * 1.5 + 10 * math.sqrt(rate_rps * duration_s + 1)))
        while True:
            offsets = _cumulative(inter_arrivals(kind, rate_rps, drawn, seed=seed, burstiness=burstiness))
            if offsets[-1] >= duration_s:
                return [t for t in offsets if t < duration_s]
            drawn *= 2
    return _cumulative(inter_arrivals(kind, rate_rps, count, seed=seed, burstiness=burstiness))


def _cumulative(gaps: list[float]) -> list[float]:
    """Offsets of arrivals separated by `gaps`, the first at 0 (the last gap is not used)."""
    offsets = [0.0] * len(gaps)
    for i in range(1, len(gaps)):
        offsets[i] = offsets[i - 1] + gaps[i - 1]
    return offsets
