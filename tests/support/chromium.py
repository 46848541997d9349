"""Headless Chromium for the report tests: load a page, dump its DOM, take a screenshot."""

from __future__ import annotations

import shutil
import subprocess


def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which("chromium") or "chromium", "--headless", "--no-sandbox", "--disable-gpu",
                           "--disable-dev-shm-usage", *args], capture_output=True, text=True, timeout=120)
