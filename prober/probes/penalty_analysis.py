"""Corruption analysis of one answer to the penalty probe's records task: a pure function of the
output text and what was asked for.

The answer should be `{"records": [ {...}, ... ]}` (a bare array of records is accepted too) with
`expected_records` objects carrying `expected_keys`. Penalties corrupt such output in recognisable
ways, and `analyse_records` names each one with where it first happens:

- syntax: the first offset where the text stops being JSON (not counting an end that simply comes
  too soon), and the element it falls in;
- elements: how many record objects were closed, against how many were asked for;
- keys: per element, keys that are not the expected ones; a key within a small edit distance of a
  missing expected key is a rename (`user_id` -> `userId` -> `userld`), anything else unexpected;
- quotes: strings delimited by `'` or typographic quotes instead of `"`;
- the end: a premature stop (the model ended with fewer elements than asked, or with a structure
  left open) told apart from a truncation by max_tokens (finish reason `length` / `max_tokens`);
- constrained modes (json_schema, tool): dropped optional fields (absent or null) and value drift
  (repeated ids, empty strings), the forms corruption takes when a grammar keeps the syntax valid.

The scanner is tolerant: it keeps going after an error (an implied comma, colon or brace), so a
rename deep in an array is still found after a missing comma earlier on. Model output is untrusted
text; nothing here evaluates it beyond reading JSON tokens.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MODES = ("unconstrained", "json_object", "json_schema", "tool")
# Schema-constrained modes: the grammar keeps the syntax valid, so corruption shows as early stops,
# dropped optional fields and drifting values instead.
CONSTRAINED_MODES = frozenset({"json_schema", "tool"})
# Finish reasons meaning "cut by the token budget" (OpenAI, Anthropic, some gateways); anything
# else, or none at all, means the model (or a stop sequence) ended the answer.
LENGTH_FINISHES = frozenset({"length", "max_tokens", "model_length"})

# Opening quote -> the characters that may close a string it opens. Only '"' is JSON.
_QUOTES = {'"': '"', "'": "'", "\u201c": "\u201d\u201c\"", "\u2018": "\u2019\u2018'",
           "\u201e": "\u201d\u201c\"", "\u2019": "\u2019'", "\u201d": "\u201d\""}
_STRUCTURAL = "{}[]:,"
_BARE = re.compile(r"[^\s{}\[\]:,\"'\u201c\u201d\u2018\u2019\u201e]+")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?\Z")
_LITERALS = {"true": True, "false": False, "null": None}
_FENCE = re.compile(r"\A\s*```[A-Za-z]*[ \t]*\n(.*?)\n?[ \t]*```\s*\Z", re.DOTALL)
# A typographic closing quote that ends a '"' string: followed by what may follow a string.
_SMART_CLOSE = re.compile(r"[\u201d\u2019]\s*(?=[:,}\]])")
_NESTED = object()     # the value of a key holding an object or array


@dataclass
class Element:
    """One record object inside the records array, as scanned."""

    index: int
    start: int
    end: int | None = None                  # offset of its closing brace; None: never closed
    keys: list[tuple[str, int]] = field(default_factory=list)           # (key, offset), in order
    values: dict[str, tuple[Any, int]] = field(default_factory=dict)    # key -> (value, offset)

    @property
    def complete(self) -> bool:
        return self.end is not None


@dataclass
class PenaltyAnalysis:
    """What is wrong with one answer, and where it first goes wrong. Offsets are in the text given."""

    mode: str
    records_requested: int
    parses: bool                  # the text (inside a markdown fence, if fenced) is valid JSON
    shape_ok: bool                # ... and it is a records object or a bare array of records
    records_delivered: int        # record objects opened and closed
    records_started: int
    truncated: bool               # finish reason says the token budget cut it
    unclosed: bool                # the text ended inside the JSON structure
    premature_stop: bool          # not truncated, yet fewer records than asked or a structure left open
    syntax_error_offset: int | None
    syntax_error: str | None
    renamed_keys: list[tuple[int, str, str]] = field(default_factory=list)   # (element, found, expected)
    unexpected_keys: list[tuple[int, str]] = field(default_factory=list)
    missing_keys: list[tuple[int, str]] = field(default_factory=list)        # required, closed elements
    dropped_optional: list[tuple[int, str]] = field(default_factory=list)    # absent or null
    quote_substitutions: list[int] = field(default_factory=list)             # offsets of the odd quotes
    repeated_ids: list[Any] = field(default_factory=list)
    empty_values: list[tuple[int, str]] = field(default_factory=list)
    first_corruption_offset: int | None = None
    first_corruption_index: int | None = None     # records closed before the first corruption
    first_corruption_kind: str | None = None
    element_ends: list[int] = field(default_factory=list, repr=False)

    @property
    def constrained(self) -> bool:
        return self.mode in CONSTRAINED_MODES

    @property
    def key_drift(self) -> bool:
        return bool(self.renamed_keys or self.unexpected_keys)

    @property
    def quote_substitution(self) -> bool:
        return bool(self.quote_substitutions)

    @property
    def value_drift(self) -> bool:
        return bool(self.repeated_ids or self.empty_values)

    @property
    def corrupted(self) -> bool:
        """Anything wrong that a truncation by max_tokens does not explain."""
        return self.first_corruption_offset is not None

    def element_at(self, offset: int) -> int:
        """The index of the element an offset falls in: the records closed before it."""
        return sum(1 for end in self.element_ends if end < offset)


def analyse_records(text: str, expected_records: int, expected_keys: Sequence[str],
                    optional_keys: Sequence[str] = (), finish_reason: str | None = None,
                    mode: str = "unconstrained", id_key: str | None = None) -> PenaltyAnalysis:
    """Analyse one answer. `expected_keys` lists every field (optional ones too); `id_key` (default:
    the first expected key) is the field whose values must not repeat."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (known: {', '.join(MODES)})")
    expected = list(expected_keys)
    optional = set(optional_keys)
    id_key = id_key or (expected[0] if expected else None)

    body_start, body_end = _json_span(text)
    parsed, parses, decode_error = _parse(text[body_start:body_end])
    scan = _Scanner(text, body_start, body_end)
    scan.run()
    if not parses and not scan.unclosed and scan.error is None and not scan.quotes:
        # Something the forgiving scanner lets pass (a raw control character in a string, an
        # invalid escape): json's own verdict places the error.
        scan.fail(body_start + decode_error, "invalid JSON")

    truncated = (finish_reason or "").lower() in LENGTH_FINISHES
    delivered = [e for e in scan.elements if e.complete]
    premature = not truncated and (len(delivered) < expected_records or scan.unclosed)
    result = PenaltyAnalysis(
        mode=mode, records_requested=expected_records, parses=parses, shape_ok=parses and _records_shape(parsed),
        records_delivered=len(delivered), records_started=len(scan.elements), truncated=truncated,
        unclosed=scan.unclosed, premature_stop=premature, syntax_error_offset=scan.error_offset,
        syntax_error=scan.error, quote_substitutions=scan.quotes,
        element_ends=sorted(e.end for e in delivered if e.end is not None))

    candidates: list[tuple[int, str]] = []     # (offset, kind) of every corruption found
    if result.syntax_error_offset is not None:
        candidates.append((result.syntax_error_offset, "syntax"))
    candidates += [(offset, "quote") for offset in scan.quotes]
    for element in scan.elements:
        _check_keys(element, expected, optional, result, candidates)
    if premature:
        candidates.append((len(text), "premature_stop"))
    if result.constrained:
        _check_values(delivered, id_key, result, candidates)
    if candidates:
        offset, kind = min(candidates)
        result.first_corruption_offset, result.first_corruption_kind = offset, kind
        result.first_corruption_index = result.element_at(offset)
    return result


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance: insertions, deletions and substitutions of one character."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def rename_distance_limit(key: str) -> int:
    """How far a found key may be from an expected one and still count as its rename: two edits
    (user_id -> userId, userld), a third of the length for long names."""
    return max(2, len(key) // 3)


def _check_keys(element: Element, expected: list[str], optional: set[str], result: PenaltyAnalysis,
                candidates: list[tuple[int, str]]) -> None:
    seen: set[str] = set()
    odd: list[tuple[str, int]] = []
    for key, offset in element.keys:
        if key in expected and key not in seen:
            seen.add(key)
        else:
            odd.append((key, offset))      # unknown, or an expected key written twice
    missing = [key for key in expected if key not in seen]
    for key, offset in odd:
        best = min(missing, key=lambda m: edit_distance(key.lower(), m.lower()), default=None)
        if best is not None and key not in expected and \
                edit_distance(key.lower(), best.lower()) <= rename_distance_limit(best):
            missing.remove(best)
            result.renamed_keys.append((element.index, key, best))
            candidates.append((offset, "renamed_key"))
        else:
            result.unexpected_keys.append((element.index, key))
            candidates.append((offset, "unexpected_key"))
    if element.end is None:
        return                             # the keys it never reached are not missing
    for key in missing:
        if key in optional:
            result.dropped_optional.append((element.index, key))
            if result.constrained:
                candidates.append((element.end, "dropped_optional"))
        else:
            result.missing_keys.append((element.index, key))
            candidates.append((element.end, "missing_key"))
    for key in optional:
        if key in seen and element.values.get(key, (_NESTED, 0))[0] is None:
            result.dropped_optional.append((element.index, key))
            if result.constrained:
                candidates.append((element.values[key][1], "dropped_optional"))


def _check_values(delivered: list[Element], id_key: str | None, result: PenaltyAnalysis,
                  candidates: list[tuple[int, str]]) -> None:
    ids: Counter[Any] = Counter()
    for element in delivered:
        for key, (value, offset) in element.values.items():
            if value == "":
                result.empty_values.append((element.index, key))
                candidates.append((offset, "empty_value"))
            if key == id_key and value is not _NESTED and value is not None:
                marker = json.dumps(value)
                ids[marker] += 1
                if ids[marker] == 2:
                    result.repeated_ids.append(value)
                    candidates.append((offset, "repeated_id"))


def _json_span(text: str) -> tuple[int, int]:
    """Where the JSON is: inside a markdown code fence if the whole answer is one, else all of it."""
    fence = _FENCE.match(text)
    if fence:
        return fence.start(1), fence.end(1)
    return 0, len(text)


def _parse(body: str) -> tuple[Any, bool, int]:
    """(value, parses, offset of the decode error)."""
    try:
        return json.loads(body), True, 0
    except json.JSONDecodeError as exc:
        return None, False, exc.pos


def _records_shape(value: Any) -> bool:
    array = value.get("records") if isinstance(value, dict) else value
    return isinstance(array, list) and all(isinstance(item, dict) for item in array)


class _Container:
    __slots__ = ("kind", "state", "after_comma", "element", "key")

    def __init__(self, kind: str, element: Element | None) -> None:
        self.kind = kind                  # "{" or "["
        self.state = "key" if kind == "{" else "value"
        self.after_comma = False
        self.element = element            # set when this object is a record of the records array
        self.key: tuple[str, int] | None = None    # the key whose value comes next


class _Scanner:
    """A forgiving JSON tokenizer and state machine over text[start:end]: records the first syntax
    error, every substituted quote and every record element with its keys and scalar values."""

    def __init__(self, text: str, start: int, end: int) -> None:
        self.text, self.start, self.end = text, start, end
        self.stack: list[_Container] = []
        self.records: _Container | None = None
        self.elements: list[Element] = []
        self.quotes: list[int] = []
        self.error_offset: int | None = None
        self.error: str | None = None
        self.unclosed = False

    def fail(self, offset: int, message: str) -> None:
        if self.error_offset is None:
            self.error_offset, self.error = offset, message

    def run(self) -> None:
        text, i, end = self.text, self.start, self.end
        while i < end and text[i].isspace():
            i += 1
        if i == end:
            self.unclosed = True          # nothing at all: the answer ended before the JSON began
            return
        if text[i] not in "{[":
            self.fail(i, "text before the JSON")
            found = min((p for p in (text.find("{", i, end), text.find("[", i, end)) if p >= 0), default=-1)
            if found < 0:
                return
            i = found
        root_done = False
        while i < end:
            char = text[i]
            if char.isspace():
                i += 1
                continue
            if root_done:
                self.fail(i, "text after the JSON")
                return
            if char in _STRUCTURAL:
                self.punctuation(char, i)
                i += 1
            elif char in _QUOTES:
                start = i
                value, i, closed = self.string(i)
                if closed:                 # a string cut off by the end of the text is not read
                    self.scalar(value, start, is_string=True)
            else:
                match = _BARE.match(text, i, end)
                # Whitespace, structure and quotes are taken above: any other character starts a word.
                assert match is not None
                if match.end() < end:      # nor is a word the end of the text may have cut
                    self.scalar(match.group(), i, is_string=False)
                i = match.end()
            root_done = not self.stack
        self.unclosed = bool(self.stack)

    # tokens ---------------------------------------------------------------------------------------
    def string(self, i: int) -> tuple[str, int, bool]:
        """The string opened at i, the offset after it and whether it closed; a substituted quote
        is noted."""
        text, end = self.text, self.end
        opener = text[i]
        closers = _QUOTES[opener]
        if opener != '"':
            self.quotes.append(i)
        chars: list[str] = []
        j = i + 1
        while j < end:
            char = text[j]
            if char == "\\" and opener == '"' and j + 1 < end:
                escaped, j = _unescape(text, j + 1)
                chars.append(escaped)
                continue
            if char in closers:
                return "".join(chars), j + 1, True
            if opener == '"' and _SMART_CLOSE.match(text, j, end):
                self.quotes.append(j)
                return "".join(chars), j + 1, True
            chars.append(char)
            j += 1
        return "".join(chars), end, False

    def scalar(self, raw: str, offset: int, is_string: bool) -> None:
        if not self.stack:
            self.fail(offset, "a bare value where the JSON should start")
            return
        top = self.stack[-1]
        if not is_string:
            value = self.bare_value(raw, offset, top)
        else:
            value = raw
        if top.kind == "{":
            if top.state == "comma":
                self.fail(offset, "missing comma between members")
                top.state = "key"
            if top.state == "colon":
                self.fail(offset, "missing colon after a key")
                top.state = "value"
            if top.state == "key":
                self.key(top, str(raw), offset)
                return
            self.value(top, value, offset)
        else:
            if top.state == "comma":
                self.fail(offset, "missing comma between elements")
            top.state, top.after_comma = "comma", False

    def bare_value(self, word: str, offset: int, top: _Container) -> Any:
        if word in _LITERALS:
            return _LITERALS[word]
        if _NUMBER.match(word):
            return json.loads(word)
        if top.kind == "{" and top.state == "key":
            self.fail(offset, f"unquoted key {word[:40]!r}")
        else:
            self.fail(offset, f"not a JSON value: {word[:40]!r}")
        return word

    def key(self, top: _Container, key: str, offset: int) -> None:
        top.key = (key, offset)
        top.state, top.after_comma = "colon", False
        if top.element is not None:
            top.element.keys.append((key, offset))

    def value(self, top: _Container, value: Any, offset: int) -> None:
        if top.element is not None and top.key is not None:
            top.element.values.setdefault(top.key[0], (value, offset))
        top.key = None
        top.state, top.after_comma = "comma", False

    def punctuation(self, char: str, offset: int) -> None:
        if char in "{[":
            self.open(char, offset)
        elif char in "}]":
            self.close(char, offset)
        elif not self.stack:
            self.fail(offset, f"{char!r} outside the JSON")
        elif char == ":":
            top = self.stack[-1]
            if top.kind == "{" and top.state == "colon":
                top.state = "value"
            else:
                self.fail(offset, "unexpected ':'")
                if top.kind == "{":
                    top.state = "value"
        else:   # ","
            top = self.stack[-1]
            if top.state == "comma":
                top.state = "key" if top.kind == "{" else "value"
                top.after_comma = True
            else:
                self.fail(offset, "unexpected ','")

    def open(self, char: str, offset: int) -> None:
        element = None
        if self.stack:
            top = self.stack[-1]
            if top.kind == "{" and top.element is not None and char == "{" and top.state in ("comma", "key"):
                # A record followed by the next one without its closing brace: close it implicitly
                # (left incomplete) and carry on in the array.
                self.fail(offset, "record not closed before the next one")
                self.stack.pop()
                top = self.stack[-1]
            if top.kind == "{":
                if top.state in ("key", "comma"):
                    self.fail(offset, "a container where a key should be")
                elif top.state == "colon":
                    self.fail(offset, "missing colon after a key")
                self.value(top, _NESTED, offset)
            else:
                if top.state == "comma":
                    self.fail(offset, "missing comma between elements")
                top.state, top.after_comma = "comma", False
                if top is self.records and char == "{":
                    element = Element(index=len(self.elements), start=offset)
                    self.elements.append(element)
        container = _Container(char, element)
        self.stack.append(container)
        if char == "[" and self.records is None:
            self.records = container

    def close(self, char: str, offset: int) -> None:
        opener = "{" if char == "}" else "["
        depth = next((d for d in range(len(self.stack) - 1, -1, -1) if self.stack[d].kind == opener), None)
        if depth is None:
            self.fail(offset, f"unmatched {char!r}")
            return
        if depth != len(self.stack) - 1:
            self.fail(offset, f"{char!r} closes a container with others still open")
        top = self.stack[depth]
        if top.after_comma:
            self.fail(offset, f"trailing comma before {char!r}")
        elif top.kind == "{" and top.state in ("colon", "value"):
            self.fail(offset, "a key without a value")
        del self.stack[depth:]
        if top.element is not None:
            top.element.end = offset


def _unescape(text: str, i: int) -> tuple[str, int]:
    """The character an escape stands for (text[i] follows the backslash), and the offset after it."""
    char = text[i]
    if char == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 1:i + 5]):
        return chr(int(text[i + 1:i + 5], 16)), i + 5
    return {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}.get(char, char), i + 1
