"""prober/reports/csv_text.py writes the bytes csv.writer writes for the same cells (None and NaN
empty, dicts and lists as sorted JSON, text spreadsheet-safe), whatever the cells hold: quotes,
commas, line breaks, formula starts, unicode, NUL, numbers, timestamps and columns of mixed types."""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools
import json
import math
import random
from typing import Any

import pytest

from prober.reports.csv_text import FORMULA_STARTS, csv_text

HOSTILE = ['say "hi"', '"', '""', "a,b", ",", "one\ntwo", "cr\rlf", "\r\n", "=HYPERLINK(\"http://x\",\"y\")",
           "+1", "-2", "@SUM(A1)", "\t=1", "\r=1", "=", "'already", "é€😀 ünïcödé", "\u202eevil", "a\x00b", "",
           " lead", "trail ", "plain", "None", "nan", "True", "1,5", '{"k": "v, w"}', "x" * 3000 + '"']
VALUES: list[Any] = [*HOSTILE, None, 0, -1, 10**20, 1.5, -0.0, 1e-7, float("nan"), float("inf"), -float("inf"),
                     True, False, dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
                     dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC), {"b": 1, "a": "=x,\"y\""}, [1, "two"],
                     {}, []]


def _reference_cell(value: Any) -> Any:
    """The cells csv.writer was given before csv_text: the export's rules, then csv.writer's str()."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (dict, list)):
        value = json.dumps(value, sort_keys=True)
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _reference(rows: list[list[Any]]) -> str:
    buffer = io.StringIO(newline="")
    csv.writer(buffer).writerows([[_reference_cell(value) for value in row] for row in rows])
    return buffer.getvalue()


@pytest.mark.unit
@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_each_value_alone_and_beside_others(value: Any) -> None:
    for rows in ([[value]], [[value, "x"]], [["x", value, None]], [[value], [value]]):
        assert csv_text(rows) == _reference(rows), rows


@pytest.mark.unit
def test_columns_of_one_type_and_of_mixed_types() -> None:
    # a column of each single type takes a fast path; mixed columns (and pairs of kinds) another
    by_type = itertools.groupby(sorted(VALUES, key=lambda v: type(v).__name__), key=lambda v: type(v).__name__)
    columns = [list(group) for _, group in by_type]
    columns += [[a, b] for a, b in itertools.combinations(VALUES, 2)]
    for column in columns:
        rows = [[value, len(column)] for value in column]
        assert csv_text(rows) == _reference(rows), column


@pytest.mark.unit
def test_random_tables_match_csv_writer() -> None:
    chooser = random.Random(31)
    for _ in range(200):
        width, height = chooser.randint(1, 6), chooser.randint(1, 30)
        pools = [chooser.sample(VALUES, chooser.randint(1, 4)) for _ in range(width)]
        rows = [[chooser.choice(pool) for pool in pools] for _ in range(height)]
        assert csv_text(rows) == _reference(rows), rows


@pytest.mark.unit
def test_no_rows_no_text() -> None:
    assert csv_text([]) == ""


@pytest.mark.unit
def test_columns_of_few_distinct_values_convert_each_once_and_stay_exact() -> None:
    # a column repeating a few values takes the path that converts each distinct value once; equal
    # instants in other zones (equal datetimes, other texts) and 0 / 0.0 / -0.0 / False stay apart
    utc = dt.datetime(2026, 1, 2, 3, tzinfo=dt.UTC)
    zones = [utc, utc.astimezone(dt.timezone(dt.timedelta(hours=2))), utc.replace(microsecond=5), None]
    chooser = random.Random(5)
    for pool in (zones, HOSTILE[:6] + [None], [0, 0.0, -0.0, False, None], [True, 1, 1.0]):
        column = [chooser.choice(pool) for _ in range(60)]
        rows = [[value, index] for index, value in enumerate(column)]
        assert csv_text(rows) == _reference(rows), pool


@pytest.mark.unit
def test_a_converter_makes_its_column() -> None:
    rows = [["a", {"k": 1}], ["b", None]]
    assert csv_text(rows, {1: lambda values: ["x" for _ in values]}) == "a,x\r\nb,x\r\n"
