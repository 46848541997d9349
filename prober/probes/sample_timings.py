"""Per-request timings read from a stored sample, shared by the latency, load and calibration code."""

from __future__ import annotations

import itertools

from prober.core.records import SampleRow


def request_itl_ms(row: SampleRow) -> list[float]:
    """The gaps between one request's content chunks, in milliseconds (its inter-token latencies)."""
    offsets = row.get("chunk_offsets_ms") or []
    return [b - a for a, b in itertools.pairwise(offsets)]
