"""Exceptions that reach the command line, as one line and an exit code: never a traceback.

Exit codes (README, "Exit codes"): 2 when the user can fix it by changing what they asked for (a
path that cannot be written, a port in use, a store that is not a database); 3 when the command
could not complete (the store failed while writing, the disk is full). A bug in prober is 3 too:
its traceback goes to a file whose path the line gives, for the bug report.
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import tempfile
import traceback

from prober.run.sample_writer import SampleStorageError
from prober.store import SampleWriteError, StoreError, StoreNotADatabase

# What the user chose badly: a path (permissions, read-only, not a directory) or an address.
_USAGE_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.ENOENT,
                 errno.EEXIST, errno.EADDRINUSE, errno.EADDRNOTAVAIL}


def describe(exc: BaseException) -> tuple[str, int]:
    """(one line, exit code) for an exception no command turned into a ProberError."""
    if isinstance(exc, (SampleStorageError, SampleWriteError)):
        return f"samples could not be stored: {exc}", 3
    if isinstance(exc, StoreNotADatabase):
        return f"store: the database file is damaged ({exc.reason}); restore it from a backup", 2
    if isinstance(exc, StoreError):
        return f"store: {exc.reason}", 3
    if isinstance(exc, OSError) and exc.errno is not None:
        place = f"{exc.filename}: " if exc.filename else ""
        return f"{place}{exc.strerror or exc}", 2 if exc.errno in _USAGE_ERRNOS else 3
    return f"internal error: {type(exc).__name__}: {_first_line(str(exc))} (a bug in prober; traceback " \
           f"saved to {_save_traceback(exc)})", 3


def _first_line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0] if text else ""


def _save_traceback(exc: BaseException) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    fd, path = tempfile.mkstemp(prefix=f"prober-crash-{stamp}-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write("".join(traceback.format_exception(exc)))
    return path
