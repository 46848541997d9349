"""Column types shared by the schema and its migrations: how values look on disk in both backends.

These are storage conventions, not schema versions: a migration may use them freely.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
from typing import Any

import sqlalchemy as sa

try:
    import orjson
except ImportError:        # optional: the stdlib encoder writes the same values, slower
    orjson = None  # type: ignore[assignment]

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


class _NotConvertible(TypeError):
    """A value neither encoder has a rule for (orjson: use the stdlib path, which writes its str())."""


def _convert(value: Any) -> Any:
    """The stored form of the non-JSON types we have a rule for."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, enum.Enum):      # orjson always writes an enum's value: so does the stdlib path
        return value.value
    raise _NotConvertible(type(value).__name__)


def _fallback(value: Any) -> Any:
    try:
        return _convert(value)
    except _NotConvertible:
        return str(value)


# orjson hands datetimes and dataclasses to `default` (_convert) instead of writing them its own way.
_ORJSON_OPTIONS = (orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS) if orjson else 0


def dumps_json(value: Any) -> str:
    """The engine's JSON serializer: never fails on a stray type, and writes only strict JSON.

    NaN and infinities are not JSON (PostgreSQL rejects them), so they are stored as null in both
    backends; datetimes become ISO strings, enums their value; anything else unknown becomes its
    str().

    orjson writes it where it is installed: a sample's dozen JSON columns cost the sample writer
    about 80 us with the stdlib encoder (it builds an encoder per call) and 6 with orjson; the
    writer's CPU per sample fell by a tenth to a fifth (bench/ttft_overhead.py at 512 streams,
    alternated six times: 0.35-0.61 ms before, 0.31-0.59 after, with the machine's speed that hour).
    Whatever orjson refuses goes through
    the stdlib encoder instead: integers beyond 64 bits, lone surrogates, keys that are not
    strings, types without a rule here (a namedtuple, which the stdlib writes as a list), nesting
    deeper than 254. The two agree on every value (tests/store/test_json_columns.py); only the
    spacing differs (orjson writes no space after `,` and `:`).
    """
    if orjson is not None:
        try:
            return orjson.dumps(value, default=_convert, option=_ORJSON_OPTIONS).decode()
        except orjson.JSONEncodeError:
            pass
    try:
        return json.dumps(value, default=_fallback, allow_nan=False, ensure_ascii=False)
    except ValueError:
        return json.dumps(_finite(value), default=_fallback, allow_nan=False, ensure_ascii=False)
