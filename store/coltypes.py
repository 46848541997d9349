"""Column types shared by the schema and its migrations: how values look on disk in both backends.

These are storage conventions, not schema versions: a migration may use them freely.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import sqlalchemy as sa

UTC = dt.UTC


class UTCDateTime(sa.types.TypeDecorator[dt.datetime]):
    """A timestamp stored in UTC and always returned timezone-aware (UTC).

    PostgreSQL gets `timestamptz`. SQLite has no time zones, so it gets a naive UTC text timestamp,
    which also sorts correctly. A naive datetime handed in is taken to be UTC already.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: sa.Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if not isinstance(value, dt.datetime):
            raise TypeError(f"expected a datetime, got {type(value).__name__}")
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: dt.datetime | None, dialect: sa.Dialect) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class SafeText(sa.types.TypeDecorator[str]):
    """Text that PostgreSQL accepts: it refuses NUL characters, which a broken endpoint can send.

    They become U+FFFD there; SQLite keeps them. (Hashes are computed before storage, on the
    original text.)
    """

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: sa.Dialect) -> str | None:
        if value is not None and dialect.name == "postgresql" and "\x00" in value:
            return value.replace("\x00", "\ufffd")
        return value


def JSONColumn() -> sa.types.JSON:
    """JSON where Python None is SQL NULL (so `{}` and None stay distinct).

    On PostgreSQL this is `json`, not `jsonb`: `json` keeps the text as written, so key order and
    the exact shape of what the wire reported survive.
    """
    return sa.JSON(none_as_null=True)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _fallback(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def dumps_json(value: Any) -> str:
    """The engine's JSON serializer: never fails on a stray type, and writes only strict JSON.

    NaN and infinities are not JSON (PostgreSQL rejects them), so they are stored as null in both
    backends; datetimes become ISO strings; anything else unknown becomes its str().
    """
    try:
        return json.dumps(value, default=_fallback, allow_nan=False, ensure_ascii=False)
    except ValueError:
        return json.dumps(_finite(value), default=_fallback, allow_nan=False, ensure_ascii=False)
