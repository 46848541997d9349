"""The progress line written where no terminal shows a bar (cron logs, CI, `docker logs`): a UTC
timestamp, what is running, done/total and the time still to go, at least every
`progress_interval_s()` seconds of a long phase, so that a silent log means a stuck process."""

from __future__ import annotations

import datetime as dt
import os

DEFAULT_INTERVAL_S = 30.0
INTERVAL_VARIABLE = "PROBER_PROGRESS_INTERVAL_S"


def progress_interval_s() -> float:
    """Seconds between two lines of a running phase: $PROBER_PROGRESS_INTERVAL_S (tests shorten it),
    else 30; a value that is not a positive number keeps the default rather than stopping a run."""
    try:
        value = float(os.environ.get(INTERVAL_VARIABLE, DEFAULT_INTERVAL_S))
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if value > 0 else DEFAULT_INTERVAL_S


def eta_s(done: int, total: int | None, elapsed_s: float) -> float | None:
    """The time still to go at the rate so far; None with no total or nothing done yet."""
    if total is None or done <= 0:
        return None
    return max(0, total - done) * elapsed_s / done


def _clock(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def progress_line(what: str, done: int, total: int | None, elapsed_s: float, *, unit: str = "requests",
                  failed: int | None = None, finished: bool = False) -> str:
    """`2026-12-03T14:58:00.125Z emulator latency concurrency=4: 10/20 requests, 0 failed, 12.3s, eta 0:00:12`;
    a finished phase ends in `done` instead of an ETA."""
    stamp = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    count = f"{done}" if total is None else f"{done}/{total}"
    parts = [f"{count} {unit}"]
    if failed is not None:
        parts.append(f"{failed} failed")
    parts.append(f"{elapsed_s:.1f}s")
    if finished:
        parts.append("done")
    else:
        eta = eta_s(done, total, elapsed_s)
        parts.append(f"eta {'?' if eta is None else _clock(eta)}")
    return f"{stamp} {what}: {', '.join(parts)}"
