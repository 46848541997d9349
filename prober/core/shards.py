"""`prober run --shard I/N`: the I-th of N deterministic slices of the selected targets.

I is 0-based, as Kubernetes' JOB_COMPLETION_INDEX is, so an Indexed Job passes
`--shard $(JOB_COMPLETION_INDEX)/N`. The targets are sorted by name and dealt round-robin: target k
of the sorted list goes to shard k mod N. Sorting makes the slices independent of the order of the
config file; dealing keeps the shards within one target of each other in size (hashing names would
not: 20 targets over 4 shards could give one shard 8). Adding a target may move others to another
shard, which costs nothing: a baseline belongs to (target, site), not to a shard.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from prober.core.errors import ConfigError

_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


def parse_shard(text: str) -> tuple[int, int]:
    """"I/N" -> (I, N), with 0 <= I < N; ConfigError otherwise."""
    match = _SHARD.fullmatch(text)
    if match:
        index, count = int(match.group(1)), int(match.group(2))
        if 0 <= index < count:
            return index, count
    raise ConfigError(f"--shard {text!r}: expected I/N with 0 <= I < N, I counted from 0 "
                      "(as JOB_COMPLETION_INDEX), e.g. --shard 0/4")


def shard_targets(names: Sequence[str], index: int, count: int) -> list[str]:
    """Shard `index` of `count` of these target names, in sorted order."""
    return sorted(set(names))[index::count]
