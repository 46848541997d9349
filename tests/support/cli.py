"""Run the real `prober` console script in a subprocess, as a user or cron would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def prober(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600,
           **kwargs) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, COLUMNS="200", NO_COLOR="1", **(env or {}))
    return subprocess.run([sys.executable, "-m", "prober.cli", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, **kwargs)
