"""Control characters from endpoints made visible instead of live.

A server's fields (a system_fingerprint of "fp_\\x1b]0;pwned\\x07\\x1b[2J", a model name, an output,
an error message) are untrusted. Written raw to a terminal they retitle the window, clear the
screen or hide text; in a Markdown file or a Prometheus label they do the same to whoever `cat`s
it. Every CLI table, the Markdown report and the Prometheus labels show them as escapes instead:
ESC becomes the four characters `\\x1b`, a right-to-left override `\\u202e`.
"""

from __future__ import annotations

import re

# C0 and C1 controls and DEL, plus the bidirectional overrides and isolates that reorder what a
# terminal or editor shows ("Trojan Source"). Other format characters (the zero-width joiner in
# emoji) are harmless and kept.
_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_CONTROLS = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), *_BIDI]


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_TABLE = {code: _escape(code) for code in _CONTROLS}
# Whether a text holds any: one C-speed search, where translate looks each character up in a dict
# (a fleet's `prober show` escapes 13,000 cells, nearly all of them clean).
_ANY_CONTROL = re.compile("[" + "".join(re.escape(chr(code)) for code in _CONTROLS) + "]").search
_TABLES: dict[str, dict[int, str]] = {"": _TABLE}


def escape_controls(text: str, keep: str = "") -> str:
    """`text` with every control character written as an escape, except those in `keep`: "\\n\\t"
    for a fenced block of model output, "\\n" where the format has its own newline escape; by
    default none, for a table cell that must stay one line."""
    if _ANY_CONTROL(text) is None:
        return text
    table = _TABLES.get(keep)
    if table is None:
        table = _TABLES[keep] = {code: text for code, text in _TABLE.items() if chr(code) not in keep}
    return text.translate(table)
