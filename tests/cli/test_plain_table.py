"""prober/commands/plain_table.py: print_metrics' tables without rich's layout engine keep rich's look
and width rules (fit the console, wrap text columns, fold a long word, never wrap a value), count
a wide character as two cells, and write a hostile cell inert: no markup run, no control character
raw."""

from __future__ import annotations

import io
import re

import pytest
from rich.cells import cell_len
from rich.console import Console

from prober.commands.plain_table import PlainColumn, render_table, wrapped
from prober.commands.terminal import print_metrics
from prober.core.records import Metric

COLUMNS = (PlainColumn("name", wraps=True), PlainColumn("value", wraps=False))
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.mark.unit
def test_a_table_that_fits_is_as_wide_as_its_content() -> None:
    text = render_table(COLUMNS, [("a", "1"), ("bbb", "22")], 80, title="t")
    assert text.splitlines() == ["       t", "┏━━━━━━┳━━━━━━━┓", "┃ name ┃ value ┃", "┡━━━━━━╇━━━━━━━┩",
                                 "│ a    │     1 │", "│ bbb  │    22 │", "└──────┴───────┘"]


@pytest.mark.unit
def test_text_wraps_and_folds_to_fit_and_values_stay_whole() -> None:
    long_word = "x" * 70
    rows = [("short words that wrap over lines " + long_word, "123,456,789 !")]
    lines = render_table(COLUMNS, rows, 30).splitlines()
    assert max(cell_len(line) for line in lines) <= 30
    body = [line for line in lines if line.startswith("│")]
    assert "123,456,789 !" in body[0]
    names = "".join(line.split("│")[1].strip() for line in body)
    assert "words that" in body[1] and long_word in names      # broken at spaces, the long word folded whole


@pytest.mark.unit
def test_wide_characters_take_two_cells() -> None:
    lines = render_table(COLUMNS, [("日本語のラベル" * 4, "1")], 24).splitlines()
    assert all(cell_len(line) <= 24 for line in lines)
    assert len({cell_len(line) for line in lines}) == 1                 # every line of the box equally wide
    assert wrapped("日本語", 4) == ["日本", "語"]


@pytest.mark.unit
def test_print_metrics_writes_hostile_cells_inert() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=100, highlight=False)
    hostile = {"fingerprint": "fp_\x1b]0;pwned\x07\x1b[2J", "markup": "[bold red]x[/]", "bidi": "a\u202eb"}
    print_metrics(console, [Metric("r", "t[x]", "p", "n\ttab", 1.0, hostile, None, None, 3, "ms")], title="run r")
    text = buffer.getvalue()
    assert not RAW_CONTROL.search(text), RAW_CONTROL.findall(text)
    assert "fingerprint=fp_\\x1b]0;pwned\\x07\\x1b[2J" in text
    assert "[bold red]x[/]" in text and "t[x] / p" in text and "n\\x09tab" in text
