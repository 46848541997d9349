"""The JSON columns' encoder: orjson where installed, and the stdlib encoder for what orjson refuses.

The stdlib path is the independent reference: every value, random or chosen to hit a known
difference between the two libraries, must read back identically (types included: an int stays an
int, -0.0 keeps its sign) whichever encoder wrote it.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import decimal
import enum
import json
import math
import random
import uuid

import pytest

from prober.store import coltypes
from prober.store.coltypes import dumps_json

pytestmark = pytest.mark.unit


class Colour(enum.Enum):
    RED = "red"
    DEEP = ("nested", 1)


class Level(enum.IntEnum):
    HIGH = 3


class Mode(enum.StrEnum):
    FAST = "fast"


@dataclasses.dataclass
class Point:
    x: int


class Opaque:
    def __str__(self) -> str:
        return "opaque-value"


class Ratio(float):
    pass


class Count(int):
    pass


Pair = collections.namedtuple("Pair", "left right")

_STRINGS = ["", "plain", "quote \" and \\ backslash", "tab\tnew\nline", "nul\x00", "\x01\x1f\x7f",
            "é ü ß 中文", "emoji 😀", "\u2028\u2029", "lone \ud800 surrogate", "\udc00", "</script>"]
_FLOATS = [0.0, -0.0, 1.5, -2.25, 1e-7, 1e16, 1e22, 1e308, 5e-324, 123456.789, 0.1 + 0.2,
           float("nan"), float("inf"), float("-inf")]
_INTS = [0, -1, 7, 2**31, 2**53 + 1, 2**63 - 1, -2**63, 2**63, 2**64 - 1, 2**64, -2**63 - 1, 10**30]
_ODD = [dt.datetime(2026, 12, 2, 13, 0, 5, 250000, tzinfo=dt.UTC), dt.datetime(2026, 1, 1),
        dt.date(2026, 12, 2), dt.time(13, 5), {3, 1, 2}, frozenset({"b", "a"}), b"bytes \xff",
        Colour.RED, Colour.DEEP, Level.HIGH, Mode.FAST, uuid.UUID(int=5), Point(1),
        decimal.Decimal("1.10"), Opaque(), Ratio(2.5), Count(4), Pair(1, "two"), (1, "tuple"),
        collections.OrderedDict(b=1, a=2), bytearray(b"ba"), True, False, None]


def _scalar(rng: random.Random) -> object:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.choice(_STRINGS)
    if kind == 1:
        return rng.choice(_FLOATS) if rng.random() < 0.5 else rng.uniform(-1e6, 1e6)
    if kind == 2:
        return rng.choice(_INTS) if rng.random() < 0.5 else rng.randrange(-10**6, 10**6)
    if kind == 3:
        return rng.choice(_ODD)
    if kind == 4:
        return "".join(chr(rng.randrange(0x20, 0x2fff)) for _ in range(rng.randrange(8)))
    return rng.choice([True, False, None])


def _value(rng: random.Random, depth: int = 0) -> object:
    roll = rng.random()
    if depth > 4 or roll < 0.4:
        return _scalar(rng)
    if roll < 0.7:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    keys: list[object] = [rng.choice(_STRINGS) for _ in range(rng.randrange(5))]
    if rng.random() < 0.1:
        keys.append(rng.choice([1, 2.5, True, None]))        # not strings: the stdlib converts them
    return {key: _value(rng, depth + 1) for key in keys}


def _stdlib(value: object, monkeypatch: pytest.MonkeyPatch) -> str:
    with monkeypatch.context() as patch:
        patch.setattr(coltypes, "orjson", None)
        return dumps_json(value)


def _identical(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        assert isinstance(b, float)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(_identical(a[k], b[k]) for k in a)
    return a == b


def _reads_back_alike(value: object, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = dumps_json(value), _stdlib(value, monkeypatch)
    # Lone surrogates cannot be UTF-8: orjson refuses them, and the stdlib keeps them as written.
    fast_value = json.loads(fast)
    assert _identical(fast_value, json.loads(slow)), (value, fast, slow)


def test_orjson_writes_the_columns_where_installed():
    assert coltypes.orjson is not None
    assert dumps_json({"a": [1, 2.5]}) == '{"a":[1,2.5]}'        # orjson's spacing, not the stdlib's


def test_every_chosen_value_reads_back_as_the_stdlib_encoder_wrote_it(monkeypatch):
    for value in [*_STRINGS, *_FLOATS, *_INTS, *_ODD, {"k": _ODD}, [_FLOATS, _INTS]]:
        _reads_back_alike(value, monkeypatch)


def test_random_values_read_back_as_the_stdlib_encoder_wrote_them(monkeypatch):
    rng = random.Random(20261202)
    for _ in range(3000):
        _reads_back_alike(_value(rng), monkeypatch)


def test_what_orjson_refuses_takes_the_stdlib_path(monkeypatch):
    refused = {"big": [2**64, -2**63 - 1, 10**30], "surrogate": "\ud800", "keys": {1: "int key"},
               "pair": Pair(1, 2), "deep": [[[[]]]]}
    for key, value in refused.items():
        assert dumps_json(value) == _stdlib(value, monkeypatch), key
    deep: list = []
    for _ in range(300):
        deep = [deep]
    assert dumps_json(deep) == _stdlib(deep, monkeypatch)


def test_never_fails_and_writes_strict_json(monkeypatch):
    value = {"nan": float("nan"), "inf": [float("inf")], "when": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
             "set": {2, 1}, "odd": Opaque(), "enum": Colour.RED}
    for text in (dumps_json(value), _stdlib(value, monkeypatch)):
        assert json.loads(text, parse_constant=pytest.fail) == {
            "nan": None, "inf": [None], "when": "2026-01-01T00:00:00+00:00", "set": [1, 2],
            "odd": "opaque-value", "enum": "red"}
