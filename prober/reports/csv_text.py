"""CSV text byte for byte as `csv.writer` writes it (the excel dialect: a field is quoted only when
it holds a comma, a quote, CR or LF, a quote inside is doubled, lines end in CRLF), with every text
cell made spreadsheet-safe and None and NaN written as empty cells, built a column at a time.

csv.writer costs a Python call per row to build its cells and C work per character once called; a
week of a fleet's samples is 50,000 rows of 43 cells and 130 MB of text (13 CPU s through it). Here a
batch's column is converted at C speed where its types allow: numbers and timestamps by `map(str)`
alone (csv.writer writes str() of them too), text by one regular-expression search per cell for a
character that needs quoting. Python code runs only for the cells that need quotes or a formula
guard, and for columns of other types (a dict or list becomes JSON text), a cell at a time.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from typing import Any

# A spreadsheet runs a cell starting with one of these as a formula (a tab or CR before one too).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NEEDS_QUOTES = re.compile('[,"\r\n]').search
_QUOTE, _TWO_QUOTES = '"', '""'
_NONE = type(None)
# Types whose str() never holds a character that needs quoting and is never guarded as a formula
# (a number's leading minus is a number's: spreadsheet_safe leaves non-text alone).
_PLAIN = frozenset({int, bool, float, dt.datetime, _NONE})


def spreadsheet_safe(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text, never runs as a formula: a leading `'` (OWASP's
    advice; spreadsheets hide it)."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _quoted(text: str) -> str:
    return f'"{text.replace(_QUOTE, _TWO_QUOTES)}"' if _NEEDS_QUOTES(text) else text


def csv_cell(value: Any) -> str:
    """One cell's text, for a value of any type: what `csv_text` does a column at a time."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""                                   # as pandas writes and reads them
    if isinstance(value, (dict, list)):
        value = json.dumps(value, sort_keys=True)
    return _quoted(spreadsheet_safe(value) if isinstance(value, str) else str(value))


def _text_cells(values: list[str]) -> list[str]:
    if any(map(str.startswith, values, repeat(FORMULA_STARTS))):
        values = ["'" + value if value.startswith(FORMULA_STARTS) else value for value in values]
    marks = list(map(_NEEDS_QUOTES, values))
    if not any(marks):
        return values
    return [f'"{value.replace(_QUOTE, _TWO_QUOTES)}"' if mark else value
            for value, mark in zip(values, marks, strict=True)]


def column_cells(values: Sequence[Any]) -> list[str]:
    """The cells of one column: `csv_cell` of each value. A column of text or timestamps holding
    few distinct values (a run id, a target, a run's start on each of its metrics) converts each
    of them once. (Not numbers: 0, 0.0, -0.0 and False are equal keys with different texts.)"""
    kinds = set(map(type, values))
    # a column of one value (a batch's run, suite, site, protocol; an absent error): converted
    # once. Equal values of these types have equal texts; of others (0.0 and -0.0, equal instants
    # in other zones) only the very same object is the same value.
    if (len(kinds) == 1 and len(values) > 1 and values[-1] is values[0] and values.count(values[0]) == len(values)
            and (kinds <= _EQUAL_TEXTS or len(set(map(id, values))) == 1)):
        return _converted(values[:1], kinds) * len(values)
    keys = values if kinds <= _TEXT else _time_keys(values) if kinds <= _TIMES else None
    # judged on the column's first values: hashing a column of distinct request bodies to find
    # that out would cost more than converting it
    if keys is not None and len(set(keys[:_SAMPLE])) * 4 <= min(len(keys), _SAMPLE):
        first = dict(zip(keys, values, strict=True))          # a value of each key
        if len(first) * 4 <= len(values):
            cells = dict(zip(first, _converted(list(first.values()), kinds), strict=True))
            return list(map(cells.__getitem__, keys))
    return _converted(values, kinds)


_TEXT = frozenset({str, _NONE})
_EQUAL_TEXTS = frozenset({str, int, bool, _NONE})
_SAMPLE = 32
_TIMES = frozenset({dt.datetime, _NONE})


def _time_keys(values: Sequence[dt.datetime | None]) -> list[Any]:
    # equal instants in other time zones are equal datetimes with other texts: the zone is in the key
    return [None if value is None else (value, value.tzinfo) for value in values]


def _converted(values: Sequence[Any], kinds: set[type]) -> list[str]:
    if kinds <= _PLAIN:
        cells = list(map(str, values))
        # str(None) and str(nan) are these and only these (looked for at C speed first)
        if _NONE in kinds or (float in kinds and "nan" in cells):
            cells = ["" if cell in ("None", "nan") else cell for cell in cells]
        return cells
    if kinds == {str}:
        return _text_cells(list(values))
    if kinds == {str, _NONE}:
        return _text_cells(["" if value is None else value for value in values])
    return list(map(csv_cell, values))


def csv_text(rows: Sequence[Sequence[Any]],
             converters: Mapping[int, Callable[[Sequence[Any]], list[str]]] | None = None) -> str:
    """These rows (each as long as the first) as CSV lines, as csv.writer.writerows writes them.
    `converters`: by column index, what makes that column's cells instead of `column_cells`."""
    if not rows:
        return ""
    return csv_lines(list(zip(*rows, strict=True)), converters)


def csv_lines(columns: Sequence[Sequence[Any]],
              converters: Mapping[int, Callable[[Sequence[Any]], list[str]]] | None = None) -> str:
    """As `csv_text`, given the table as its columns (each as long as the first)."""
    if not columns or not len(columns[0]):
        return ""
    convert = converters or {}
    cells = [convert.get(index, column_cells)(values) for index, values in enumerate(columns)]
    if len(cells) == 1:                             # csv.writer quotes a lone empty field: the line is not empty
        cells = [['""' if cell == "" else cell for cell in cells[0]]]
    return "\r\n".join(map(",".join, zip(*cells, strict=True))) + "\r\n"
