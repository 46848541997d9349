"""The repository's tracked files (helpers only, no tests): what a clean clone holds, so that a
build or a check never sees an untracked file of this checkout."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@cache
def tracked_files() -> tuple[str, ...]:
    """Every tracked file's path relative to ROOT, sorted (a deleted but still tracked one left out)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], check=True, capture_output=True).stdout
    return tuple(sorted(name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()))
