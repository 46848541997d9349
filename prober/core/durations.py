"""Periods written as a number and a unit: `90d`, `12h`, `2w`, `30m` (--since, retention ages)."""

from __future__ import annotations

import datetime as dt
import re

DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*$")
_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION_EXAMPLES = "90d, 12h, 2w or 30m"


def parse_duration(text: str) -> dt.timedelta | None:
    """The period `text` names, or None when it is not a duration."""
    match = DURATION.match(text)
    if match is None:
        return None
    return dt.timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])
