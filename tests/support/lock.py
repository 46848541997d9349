"""The versions CI tests with, read from requirements/ci.lock (helpers only, no tests)."""

from __future__ import annotations

import re
from pathlib import Path

LOCK = Path(__file__).resolve().parents[2] / "requirements" / "ci.lock"


def lock_pins() -> dict[str, str]:
    """{normalized name: version} of every `name==version` line (the hashes and comments left out)."""
    pins: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)", line)
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins
