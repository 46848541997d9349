"""Box tables drawn as plain text, without rich's layout engine: `prober show` of a fleet's run is a
hundred tables of 4,000 rows, and rich measured and rendered each cell as a renderable of its own
(two thirds of the command's CPU time). The look is rich's default box (heavy head), the width
rules those of terminal.py's columns: a text column wraps on spaces and folds a longer word, a
value column is never wrapped and is right-justified; the table is as wide as its content, and
when that is wider than the console its text columns shrink, the widest first, until it fits.

Cells are taken as they come, to be written raw: the caller makes them inert (terminal.inert).
Widths are terminal cells (rich.cells): a wide character takes two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len, chop_cells

# Left, divider, right and fill of each kind of line (rich.box.HEAVY_HEAD).
_TOP, _HEAD, _HEAD_RULE, _ROW, _BOTTOM = ("┏", "┳", "┓", "━"), ("┃", "┃", "┃", " "), ("┡", "╇", "┩", "━"), \
    ("│", "│", "│", " "), ("└", "┴", "┘", "─")


@dataclass(frozen=True)
class PlainColumn:
    header: str
    wraps: bool        # a text column (wraps, left-justified); else a value column (one line, right-justified)


def _widths(columns: Sequence[PlainColumn], rows: Sequence[Sequence[str]], room: int) -> list[int]:
    """Each column's width: its widest cell, then the widest text columns narrowed a cell at a time
    (never below their header) while the table is wider than `room`."""
    widths = [max([cell_len(column.header), *(cell_len(row[index]) for row in rows)])
              for index, column in enumerate(columns)]
    excess = sum(widths) + 3 * len(widths) + 1 - room
    floors = [cell_len(column.header) if column.wraps else width for column, width in zip(columns, widths, strict=True)]
    while excess > 0:
        narrowable = [index for index, width in enumerate(widths) if width > floors[index]]
        if not narrowable:
            break
        widest = max(narrowable, key=lambda index: widths[index])
        widths[widest] -= 1
        excess -= 1
    return widths


def wrapped(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` cells: broken at spaces, a word longer than a line folded
    over as many as it needs (nothing is cut)."""
    if cell_len(text) <= width:
        return [text]
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        for piece in chop_cells(word, width) if cell_len(word) > width else [word]:
            if line and cell_len(line) + 1 + cell_len(piece) <= width:
                line += " " + piece
            else:
                if line:
                    lines.append(line)
                line = piece
    lines.append(line)
    return lines


def _rule(kind: tuple[str, str, str, str], widths: Sequence[int]) -> str:
    left, divider, right, fill = kind
    return left + divider.join(fill * (width + 2) for width in widths) + right


def _lines(kind: tuple[str, str, str, str], cells: Sequence[str], columns: Sequence[PlainColumn],
           widths: Sequence[int]) -> list[str]:
    """One table row: as many lines as its most wrapped cell."""
    left, divider, right, _ = kind
    if all(cell_len(cell) <= width for cell, width in zip(cells, widths, strict=True)):
        parts = [[cell] for cell in cells]
    else:
        parts = [wrapped(cell, width) if column.wraps else [cell]
                 for cell, column, width in zip(cells, columns, widths, strict=True)]
    height = max(len(part) for part in parts)
    lines = []
    for line in range(height):
        padded = []
        for part, column, width in zip(parts, columns, widths, strict=True):
            text = part[line] if line < len(part) else ""
            pad = " " * (width - cell_len(text))
            padded.append(f" {text}{pad} " if column.wraps else f" {pad}{text} ")
        lines.append(left + divider.join(padded) + right)
    return lines


def render_table(columns: Sequence[PlainColumn], rows: Sequence[Sequence[str]], room: int, title: str = "") -> str:
    """The table (title centered above it) as lines of text, fitted to `room` cells where its value
    columns leave the room to."""
    widths = _widths(columns, rows, room)
    table_width = sum(widths) + 3 * len(widths) + 1
    lines = []
    if title:
        lines += [(" " * max(0, (table_width - cell_len(line)) // 2) + line) for line in wrapped(title, table_width)]
    lines.append(_rule(_TOP, widths))
    lines += _lines(_HEAD, [column.header for column in columns], columns, widths)
    lines.append(_rule(_HEAD_RULE, widths))
    for row in rows:
        lines += _lines(_ROW, row, columns, widths)
    lines.append(_rule(_BOTTOM, widths))
    return "\n".join(lines)
