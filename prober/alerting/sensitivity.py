"""What each drift-tested family can detect here (issue 30): lines for `prober drift-power` and
`prober show`, from the decided tests' stated detectable shift (drift.DETECTION_POWER)."""

from __future__ import annotations

from collections.abc import Sequence

from prober.alerting.drift import DETECTION_POWER, DriftTest
from prober.core.records import label_text


def power_lines(tests: Sequence[DriftTest], target: str) -> list[str]:
    """One line per latency family of `target` with a stated detectable shift."""
    lines = []
    # filtered before sorting: `prober show` asks for each of a fleet's targets in turn, and a
    # test's key is built anew each time it is read
    for test in sorted((t for t in tests if t.target == target), key=lambda t: (t.probe, t.metric, t.key)):
        if test.detectable is None or not test.night_variance:
            continue
        where = label_text(test.labels)
        varies = test.night_variance ** 0.5
        shift = test.direction * test.detectable
        lines.append(f"{test.probe} {test.metric}{f' ({where})' if where else ''}: varies {varies:.0%} night to "
                     f"night here ({test.baseline_runs} baseline runs); a shift of {shift:+.0%} or more pages "
                     f"within 2 nights ({DETECTION_POWER:.0%} of the time)")
    return lines
