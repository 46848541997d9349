"""Statistics used across probes and reports. All of it lives here (DESIGN.md).

Pure functions over plain numbers; scipy only where an exact distribution is needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.959963984540054


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between closest ranks; None if empty."""
    data = sorted(v for v in values if v is not None and not math.isnan(v))
    if not data:
        return None
    if len(data) == 1:
        return float(data[0])
    rank = (q / 100.0) * (len(data) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(data) - 1)
    frac = rank - low
    return float(data[low] + (data[high] - data[low]) * frac)


def median(values: Sequence[float]) -> float | None:
    return percentile(values, 50)


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float | None, float | None]:
    """Wilson score interval for a proportion; (None, None) when n is 0."""
    if n <= 0:
        return None, None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def proportion(successes: int, n: int) -> tuple[float | None, float | None, float | None]:
    """(share, wilson_low, wilson_high); all None when n is 0."""
    if n <= 0:
        return None, None, None
    low, high = wilson_interval(successes, n)
    return successes / n, low, high
