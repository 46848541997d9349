"""The store's own errors. Every `Store` method turns a database error (SQLAlchemy's `DBAPIError`)
into one of these, so that callers outside prober/store/ catch store errors and never import
SQLAlchemy: the driver behind the store can change without the command layer or the run shell
knowing.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import sqlalchemy as sa

# SQLite's words for a file that is not (or no longer) a database.
_NOT_A_DATABASE = ("malformed", "file is not a database", "database disk image")
# SQLite's and PostgreSQL's words for a database that refuses writes (a copied file, a replica).
_READ_ONLY = ("readonly", "read-only")


class StoreError(Exception):
    """The database failed an operation. `reason`: the driver's first line (SQLAlchemy's own text
    appends the statement and every parameter over dozens of lines)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StoreNotADatabase(StoreError):
    """The store's file is not, or no longer, a database: damaged, or some other file."""


class StoreReadOnly(StoreError):
    """The database refuses writes; it can still be read (and reported on)."""


def translate(exc: sa.exc.DBAPIError) -> StoreError:
    """The store error for a driver error, by what the driver says."""
    text = str(exc.orig).strip()
    reason = text.splitlines()[0] if text else type(exc.orig).__name__
    lowered = reason.lower()
    if any(words in lowered for words in _NOT_A_DATABASE):
        return StoreNotADatabase(reason)
    if isinstance(exc, sa.exc.OperationalError) and any(words in text.lower() for words in _READ_ONLY):
        return StoreReadOnly(reason)
    return StoreError(reason)


_Class = TypeVar("_Class", bound=type)


def translating_errors(cls: _Class) -> _Class:
    """Wrap every public method and property of `cls` so that a `DBAPIError` leaves it as the
    store error `translate` gives (the driver's error stays its `__cause__`, for a traceback).
    Generator methods are translated while they are iterated, where their queries run."""
    for name, member in list(vars(cls).items()):
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            setattr(cls, name, property(_translated(member.fget) if member.fget else None,
                                        _translated(member.fset) if member.fset else None,
                                        doc=member.__doc__))
        elif isinstance(member, classmethod):
            setattr(cls, name, classmethod(_translated(member.__func__)))
        elif isinstance(member, staticmethod):
            setattr(cls, name, staticmethod(_translated(member.__func__)))
        elif inspect.isfunction(member):
            setattr(cls, name, _translated(member))
    return cls


def _translated(function: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(function):
        @functools.wraps(function)
        def generate(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from function(*args, **kwargs)
            except sa.exc.DBAPIError as exc:
                raise translate(exc) from exc
        return generate

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except sa.exc.DBAPIError as exc:
            raise translate(exc) from exc
    return call
